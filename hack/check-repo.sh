#!/usr/bin/env bash
# check-repo.sh fails when a tracked file is a compiled binary or larger than 4 MiB (built
# artefacts belong in bin/, dist/ or the tool cache, never in git history), when a tracked file
# refers to a folder beside the repository (a sibling shared/ folder, its examples or seeds): a fresh
# clone has nothing beside it, and the original operator's manifests are in pkg/testenv/compat; and
# when docs/safety.md names a test that does not exist.
set -euo pipefail
status=0
while IFS= read -r -d '' f; do
	[[ -f "$f" ]] || continue
	if [[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" == "177ELF" ]]; then
		echo "$f: compiled binary is tracked by git" >&2
		status=1
	elif (( $(stat -c %s "$f") > 4194304 )); then
		echo "$f: larger than 4 MiB" >&2
		status=1
	fi
done < <(git ls-files -z)
# This file names the patterns, so it is left out of the search.
outside='\.\./shared|shared/(examples|seeds)'
if refs="$(git grep -nIE "$outside" -- . ':!hack/check-repo.sh')"; then
	echo "$refs" >&2
	echo "these tracked files refer to files outside the repository; use pkg/testenv/compat or a public URL" >&2
	status=1
fi
# docs/safety.md names the test that proves each safety guard: every name must be a test that
# exists, so that a renamed or deleted test cannot leave a guard unproven without notice.
for name in $(grep -oE '`Test[A-Za-z0-9_]+`' docs/safety.md | tr -d '`' | sort -u); do
	if ! git grep -qE "^func $name\(" -- '*_test.go'; then
		echo "docs/safety.md names $name, which is not a test in the repository" >&2
		status=1
	fi
done
exit $status
