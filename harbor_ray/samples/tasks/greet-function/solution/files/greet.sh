# Defines the function greet. Use: source /app/greet.sh; greet NAME
greet() {
    printf 'Hello, %s!\n' "$1"
}
