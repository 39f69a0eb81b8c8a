# Runner self-test: a --script that fails.
echo "failing on purpose"
exit 1
