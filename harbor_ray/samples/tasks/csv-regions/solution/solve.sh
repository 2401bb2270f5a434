#!/bin/bash
tail -n +2 /app/sales.csv | cut -d, -f2 | sort -u > /app/regions.txt
