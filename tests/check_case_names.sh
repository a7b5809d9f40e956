#!/bin/sh
# Fails if a doctest test case's name holds a ';'. doctest_discover_tests
# cuts a name there (a CMake list separator), and the ctest test made from
# it then selects no case and passes without running one.
# Usage: check_case_names.sh TEST_BINARY...
status=0
for binary in "$@"; do
  bad=$("$binary" --list-test-cases --no-intro --no-version | grep -F "$(printf '\073')")
  if [ -n "$bad" ]; then
    printf '%s: test case names ctest cannot run (no ";" in a name):\n%s\n' "$binary" "$bad"
    status=1
  fi
done
exit $status
