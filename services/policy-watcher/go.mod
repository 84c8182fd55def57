module github.com/enforcement-io/enforcement/services/policy-watcher

go 1.26
