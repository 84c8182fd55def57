module github.com/enforcement-io/enforcement/pkg/service

go 1.26
