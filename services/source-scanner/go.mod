module github.com/enforcement-io/enforcement/services/source-scanner

go 1.26
