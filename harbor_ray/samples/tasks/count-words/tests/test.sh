#!/bin/bash
# The count is fixed here rather than recomputed from /app/input.txt, which the agent
# could have changed.
if [ "$(tr -d '[:space:]' < /app/answer.txt)" = "23" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
