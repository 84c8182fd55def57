module github.com/enforcement-io/enforcement/pkg/events

go 1.26
