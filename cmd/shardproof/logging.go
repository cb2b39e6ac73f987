package main

import (
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/internal/errcode"
)

// logFlags are the root's logging flags, shared by every command: one
// format and one level for all of a process's structured logs, so a
// site's log collector parses synth, verify, publish, worker and gate
// lines alike.
var logFlags struct {
	format, level string
}

// logSettings are logFlags parsed.
var logSettings = struct {
	json  bool
	level slog.Level
}{level: slog.LevelInfo}

func init() {
	pf := rootCmd.PersistentFlags()
	pf.StringVar(&logFlags.format, "log-format", envOr("SHARDPROOF_LOG_FORMAT", "text"), "log format: text (key=value) or json (one object per line); $SHARDPROOF_LOG_FORMAT sets the default")
	pf.StringVar(&logFlags.level, "log-level", envOr("SHARDPROOF_LOG_LEVEL", "info"), "lowest level logged: debug, info, warn or error; $SHARDPROOF_LOG_LEVEL sets the default")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// setupLogging parses the logging flags and makes the default logger
// write cmd's stderr in their format and level.
func setupLogging(cmd *cobra.Command) error {
	switch strings.ToLower(logFlags.format) {
	case "text":
		logSettings.json = false
	case "json":
		logSettings.json = true
	default:
		return errcode.New(errcode.Usage, "%s: --log-format %q: want text or json", cmd.CommandPath(), logFlags.format)
	}
	if err := logSettings.level.UnmarshalText([]byte(logFlags.level)); err != nil || !namedLevel(logSettings.level) {
		return errcode.New(errcode.Usage, "%s: --log-level %q: want debug, info, warn or error", cmd.CommandPath(), logFlags.level)
	}
	slog.SetDefault(newLogger(cmd.ErrOrStderr(), logSettings.level))
	// Child processes (the process executor's tasks, Slurm's, which
	// inherit the environment) log the same way.
	os.Setenv("SHARDPROOF_LOG_FORMAT", strings.ToLower(logFlags.format))
	os.Setenv("SHARDPROOF_LOG_LEVEL", strings.ToLower(logSettings.level.String()))
	return nil
}

// namedLevel reports whether l is one of the four named levels
// (slog also accepts offsets such as "info+2").
func namedLevel(l slog.Level) bool {
	switch l {
	case slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError:
		return true
	}
	return false
}

// newLogger logs to w in the process's log format, at level or above.
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	o := &slog.HandlerOptions{Level: level}
	if logSettings.json {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// cmdLogger logs to w in the process's log format and level, warnings
// and errors only with quiet.
func cmdLogger(w io.Writer, quiet bool) *slog.Logger {
	level := logSettings.level
	if quiet {
		level = max(level, slog.LevelWarn)
	}
	return newLogger(w, level)
}
