//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGateServeSIGHUPDuringStartUp: a `gate serve` sent SIGHUP while it
// starts neither dies of it (the default action of SIGHUP, which it
// catches to reload --verifier-keys) nor loses it: the reload is done
// once the node is up. The gate is held in its start-up by its
// --token-file, a FIFO (as a shell's <(…) hands it a secret) that the
// test opens for writing only once the gate opened it to read, and the
// signal is sent then: the gate read its files before it caught the
// signal, and a SIGHUP meanwhile ended it.
func TestGateServeSIGHUPDuringStartUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a gate server")
	}
	keys := t.TempDir()
	_, pub, id := keyPair(t, keys, "v")
	fifo := filepath.Join(t.TempDir(), "token")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "gate", "serve", "--bootstrap", "--data", filepath.Join(t.TempDir(), "gate"),
		"--http-addr", httpAddr, "--raft-addr", freeAddr(t), "--token-file", fifo, "--verifier-keys", pub)
	cmd.Env = cliEnv()
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	}()
	// Open for writing without blocking succeeds once a reader has the
	// FIFO open: the gate is reading its --token-file.
	var w *os.File
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if w, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			break
		}
		if !errors.Is(err, syscall.ENXIO) {
			t.Fatal(err)
		}
		select {
		case <-exited:
			t.Fatalf("gate serve exited before it read its --token-file: %v\n%s", waitErr, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate serve did not open its --token-file:\n%s", stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("c2hhcmRwcm9vZiBnYXRlIHRva2Vu\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()

	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("gate serve, sent SIGHUP while it started, exited: %v\n%s", waitErr, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate serve, sent SIGHUP while it started, did not reload its keys once up:\n%s", stderr.String())
		}
		l := stderr.String()
		up, reloaded := strings.Index(l, "gate node started"), strings.Index(l, "verifier keys reloaded")
		if reloaded < 0 {
			continue
		}
		if up < 0 || reloaded < up || !strings.Contains(l[reloaded:], "verifierKeys="+id) {
			t.Fatalf("the reload asked while the gate started: want it logged after the start, with the keys:\n%s", l)
		}
		break
	}
	cmd.Process.Signal(os.Interrupt)
	<-exited
	if waitErr != nil {
		t.Fatalf("gate serve exited with %v after SIGINT\n%s", waitErr, stderr.String())
	}
}
