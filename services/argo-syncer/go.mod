module github.com/enforcement-io/enforcement/services/argo-syncer

go 1.26
