//go:build linux

package natsconn

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// embeddedStartTimeout bounds the wait for an embedded server's listener.
const embeddedStartTimeout = 10 * time.Second

// embeddedOptions are the options of a server in this process: JetStream
// storing into dir, a random loopback port, no logging, and no signal
// handlers (the process's own handle SIGINT and SIGTERM).
func embeddedOptions(dir string) *server.Options {
	return &server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
	}
}

// StartEmbedded starts a NATS server with JetStream in this process, on a
// random loopback port, storing into dir; dir "" means a new temporary
// directory, which stop removes. It returns the server's client URL (for
// Options.URL, here or in child processes) and stop, which shuts the server
// down and waits for it; stop is idempotent. Connectors should be closed
// before stop: afterwards they only fail with ErrUnreachable.
func StartEmbedded(dir string) (url string, stop func(), err error) {
	owned := dir == ""
	if owned {
		if dir, err = os.MkdirTemp("", "omnishm-nats-"); err != nil {
			return "", nil, fmt.Errorf("natsconn: embedded server: %w", err)
		}
	}
	removeDir := func() {
		if owned {
			os.RemoveAll(dir)
		}
	}
	s, err := server.NewServer(embeddedOptions(dir))
	if err != nil {
		removeDir()
		return "", nil, fmt.Errorf("natsconn: embedded server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(embeddedStartTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		removeDir()
		return "", nil, errors.New("natsconn: embedded server did not start")
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			s.Shutdown()
			s.WaitForShutdown()
			removeDir()
		})
	}
	return s.ClientURL(), stop, nil
}
