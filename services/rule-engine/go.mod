module github.com/enforcement-io/enforcement/services/rule-engine

go 1.26
