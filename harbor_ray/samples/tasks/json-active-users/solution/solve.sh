#!/bin/bash
python3 - <<'PY'
import json

with open("/app/users.json") as source:
    users = json.load(source)
with open("/app/active.json", "w") as target:
    json.dump(sorted(user["name"] for user in users if user["active"]), target)
PY
