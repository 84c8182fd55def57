module github.com/enforcement-io/enforcement/pkg/testenv

go 1.26
