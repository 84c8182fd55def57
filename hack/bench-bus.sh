#!/usr/bin/env bash
# bench-bus.sh measures pkg/events' publish and consume helpers next to the stock `nats bench`, in
# one run, against one nats-server binary (the one the tests use) with file storage:
#
#   publish: `nats bench js pub async` (file storage, Nats-Msg-Id dedup with the ENFORCEMENT
#            stream's 20 minute window, batches of 256, every ack awaited, 1,000 subjects, the
#            encoded event's body size and a header block of the same size) against
#            BenchmarkPublishAsync (PublishAll in batches of 256 over 1,000 ordering keys);
#   consume: `nats bench js consume` (durable pull consumer, explicit acks, 256 messages per pull)
#            against BenchmarkConsume (pull, decode, per-key dispatch, handler, ack).
#
# Rounds alternate stock and pkg/events runs so that a busy neighbour slows both alike; it prints
# every figure and the medians with their ratio. BENCH_ROUNDS (default 5) and BENCH_MSGS (default
# 50000) change the run. BENCH_PROFILE=dir also writes the pkg/events CPU profiles there.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${BENCH_ROUNDS:-5}"
msgs="${BENCH_MSGS:-50000}"
batch=256
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench-bus.sh: BENCH_ROUNDS must be a positive number, not '$rounds'" >&2; exit 2; }
[[ "$msgs" =~ ^[1-9][0-9]*$ ]] || { echo "bench-bus.sh: BENCH_MSGS must be a positive number, not '$msgs'" >&2; exit 2; }

"$root/hack/build-tools.sh" --with nats >/dev/null
cache="${ENFORCEMENT_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enforcement/tools}"
natscli="$cache/nats"
server="$cache/nats-server"

work="$(mktemp -d)"
server_pid=""
cleanup() {
	if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

# One server for every run: JetStream on file storage in a temporary directory.
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$server" -a 127.0.0.1 -p "$port" -js -sd "$work/store" >"$work/server.log" 2>&1 &
server_pid=$!
url="nats://127.0.0.1:$port"
for _ in $(seq 50); do "$natscli" -s "$url" server check connection >/dev/null 2>&1 && break; sleep 0.2; done

GOWORK=off go -C "$root/pkg/events" test -c -o "$work/events.test" .

# events_bench runs one pkg/events benchmark once and prints its output.
events_bench() {
	local name="$1" round="$2" prof=()
	if [[ -n "${BENCH_PROFILE:-}" ]]; then
		mkdir -p "$BENCH_PROFILE"
		prof=(-test.cpuprofile "$BENCH_PROFILE/$name-$round.pprof")
	fi
	(cd "$root/pkg/events" && EVENTS_BENCH_NATS_URL="$url" "$work/events.test" -test.run '^$' \
		-test.bench "^Benchmark$name\$" -test.benchtime "${msgs}x" -test.count 1 "${prof[@]}")
}

# events_per_s prints the events/s figure of a Go benchmark's output.
events_per_s() { awk '/^Benchmark/ { for (i = 1; i < NF; i++) if ($(i+1) == "events/s") { printf "%d\n", $i } }'; }

# stock_per_s prints the msgs/sec figure of `nats bench` output.
stock_per_s() { sed -n 's/.*stats: \([0-9,]*\) msgs\/sec.*/\1/p' | tr -d , | head -1; }

# median prints the median of its arguments.
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%d\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# The encoded event's size, from the publish benchmark, sizes the stock messages.
out="$(events_bench PublishAsync 0)"
body="$(awk '/^Benchmark/ { for (i = 1; i < NF; i++) if ($(i+1) == "body-B/event") printf "%d\n", $i }' <<<"$out")"
headers="$(awk '/^Benchmark/ { for (i = 1; i < NF; i++) if ($(i+1) == "header-B/event") printf "%d\n", $i }' <<<"$out")"
# The stock header block is "NATS/1.0\r\n", X-Pad, its Nats-Msg-Id (<hex time>-0-<n>, about 19
# bytes) and "\r\n": pad it to the encoded event's header block.
pad_len=$(( headers - 12 - ${#batch} - 9 - (13 + 19 + 2) ))
pad="$(head -c "$pad_len" /dev/zero | tr '\0' x)"
echo "encoded event: ${body} B body, ${headers} B headers; $msgs messages a run, $rounds rounds, server $url"

stock_pub=() stock_consume=() events_pub=() events_consume=()
for round in $(seq "$rounds"); do
	n="$natscli -s $url --no-context"
	$n stream rm benchstream -f >/dev/null 2>&1 || true
	s="$($n bench js pub async bench --multisubject --multisubjectmax 1000 --create --storage file --dedup --dedupwindow 20m --batch "$batch" \
		--size "$body" -H "X-Pad:$pad" --msgs "$msgs" --no-progress 2>&1)"
	stock_pub+=("$(stock_per_s <<<"$s")")
	s="$($n bench js consume --batch "$batch" --acks explicit --msgs "$msgs" --no-progress 2>&1)"
	stock_consume+=("$(stock_per_s <<<"$s")")
	events_pub+=("$(events_bench PublishAsync "$round" | events_per_s)")
	out="$(events_bench Consume "$round")"
	events_consume+=("$(events_per_s <<<"$out")")
	gap="$(awk '/^Benchmark/ { for (i = 1; i < NF; i++) if ($(i+1) == "max-gap-ms") printf "%d\n", $i }' <<<"$out")"
	echo "round $round: publish stock ${stock_pub[-1]}/s, PublishAll ${events_pub[-1]}/s; consume stock ${stock_consume[-1]}/s, Consume ${events_consume[-1]}/s (longest wait between two events ${gap} ms)"
done

# report prints one row: name, median, stock median, ratio, and every run.
report() {
	local name="$1" stock="$2" ours="$3"
	local ms mo
	read -ra s <<<"$stock"
	read -ra o <<<"$ours"
	ms="$(median "${s[@]}")"
	mo="$(median "${o[@]}")"
	printf '%-40s %10s/s  stock %10s/s  ratio %3d%%   (pkg/events runs: %s; stock runs: %s)\n' \
		"$name" "$mo" "$ms" $(( 100 * mo / ms )) "${o[*]}" "${s[*]}"
}
echo
echo "medians of $rounds rounds:"
report "PublishAll (js pub async, batch $batch)" "${stock_pub[*]}" "${events_pub[*]}"
report "Consume (js consume, explicit acks)" "${stock_consume[*]}" "${events_consume[*]}"
