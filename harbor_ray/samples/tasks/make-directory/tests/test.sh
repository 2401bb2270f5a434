#!/bin/bash
# Reward 1 when /app/output is a directory (not a symlink to one) with nothing in it.
if [ -d /app/output ] && [ ! -L /app/output ] && [ -z "$(ls -A /app/output)" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
