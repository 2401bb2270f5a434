#!/bin/bash
# The function runs in a fresh shell, as a user of greet.sh would source it.
got=$(bash -c 'source /app/greet.sh && greet World && greet "Ada Lovelace"' 2>&1)
expected=$'Hello, World!\nHello, Ada Lovelace!'
if [ "$got" = "$expected" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    printf 'got:\n%s\nexpected:\n%s\n' "$got" "$expected"
    echo 0 > /logs/verifier/reward.txt
fi
