#!/bin/bash
wc -w < /app/input.txt > /app/answer.txt
