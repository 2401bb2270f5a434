# Defines the function greet. Use: source /app/greet.sh; greet NAME
greet() {
    # TODO: print "Hello, NAME!" where NAME is the first argument.
    :
}
