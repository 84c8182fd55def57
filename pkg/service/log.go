package service

import (
	"io"
	"log/slog"
	"strings"
)

// NewLogger returns a JSON slog logger writing to w with a "service" attribute. LOG_LEVEL
// (debug, info, warn, error; default info) sets the level. Never log a secret.
func NewLogger(w io.Writer, service string, getenv Getenv) *slog.Logger {
	level := slog.LevelInfo
	switch strings.ToLower(getenv("LOG_LEVEL")) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})).With("service", service)
}
