#!/bin/bash
sed -i 's|sum(values) // len(values)|sum(values) / len(values)|' /app/stats.py
