module github.com/enforcement-io/enforcement/services/trigger-dispatcher

go 1.26
