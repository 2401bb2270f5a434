#!/bin/bash
# Reward 1 when /app/hello.txt holds exactly "hello", with or without one final newline.
if printf 'hello' | cmp -s - /app/hello.txt || printf 'hello\n' | cmp -s - /app/hello.txt; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
