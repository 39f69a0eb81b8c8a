#!/bin/sh
# Runner self-test: dies before printing a plan: one failure.
echo "# about to die"
exit 3
