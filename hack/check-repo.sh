#!/usr/bin/env bash
# check-repo.sh fails when a tracked file is a compiled binary or larger than 4 MiB: built
# artefacts belong in bin/, dist/ or the tool cache, never in git history.
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
exit $status
