package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// EndingProxy is a TCP proxy in front of the test Postgres that ends chosen
// connections the way a backend terminated while it was being set up does:
// it reads the startup message and answers FATAL 57P01 ("terminating
// connection due to administrator command"). Every other connection is
// passed through.
type EndingProxy struct {
	// URL is URL() with its host replaced by the proxy's (and sslmode
	// disable: the proxy declines TLS).
	URL  string
	seen atomic.Int32
}

// Seen is how many connections the proxy has accepted.
func (p *EndingProxy) Seen() int { return int(p.seen.Load()) }

// StartEndingProxy starts a proxy that ends the connections whose order
// (from 0) is in end; it stops when the test ends.
func StartEndingProxy(t testing.TB, end ...int) *EndingProxy {
	t.Helper()
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatalf("parse the test database URL: %v", err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	p := &EndingProxy{URL: u.String()}
	ends := map[int]bool{}
	for _, i := range end {
		ends[i] = true
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(p.seen.Add(1)) - 1
			if ends[n] {
				go endSession(c)
			} else {
				go pass(c, target)
			}
		}
	}()
	return p
}

// endSession answers the startup message (after declining TLS) with the
// ErrorResponse of a terminated backend and closes the connection.
func endSession(c net.Conn) {
	defer c.Close()
	be := pgproto3.NewBackend(c, c)
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := msg.(*pgproto3.SSLRequest); !ok {
			break
		}
		if _, err := c.Write([]byte("N")); err != nil {
			return
		}
	}
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01",
		Message: "terminating connection due to administrator command"})
	_ = be.Flush()
}

// pass copies bytes both ways between c and the server at target.
func pass(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
}
