package fallback

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTLSRedis: with a rediss:// URL the front door and its client talk to a
// Redis that accepts TLS only, trusting a private CA through SSL_CERT_FILE
// (README "Redis is the trust boundary"); the same server refuses a plain
// redis:// URL, and without the CA the certificate is rejected. The Redis
// here is a server of the test's own, on a port of its own.
func TestTLSRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	if os.Getenv("RAGSYNC_TLS_CHILD") != "" {
		t.Skip("the child's own run")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server on PATH")
	}
	dir := t.TempDir()
	caFile := writeTestPKI(t, dir)
	port := freePort(t)
	srv := exec.Command(bin, "--port", "0", "--tls-port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--tls-cert-file", filepath.Join(dir, "server.pem"), "--tls-key-file", filepath.Join(dir, "server.key"),
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	require.NoError(t, srv.Start(), "start a TLS redis-server")
	t.Cleanup(func() { _ = srv.Process.Kill(); _, _ = srv.Process.Wait() })
	waitListening(t, port)

	tlsURL := fmt.Sprintf("rediss://127.0.0.1:%d/0", port)
	// The system roots are read once per process, so each case runs in a
	// child with its own environment.
	child := func(url, certFile string) ([]byte, error) {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestTLSRedisChild$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "RAGSYNC_TLS_CHILD="+url, "SSL_CERT_FILE="+certFile)
		return cmd.CombinedOutput()
	}
	out, err := child(tlsURL, caFile)
	require.NoError(t, err, "a rediss:// URL and the private CA: %s", out)
	require.Contains(t, string(out), "tls-child: hit and miss answered")

	out, err = child(tlsURL, filepath.Join(dir, "none.pem"))
	require.Error(t, err, "without the CA the server's certificate must be refused: %s", out)
	require.Contains(t, string(out), "point SSL_CERT_FILE at it", "the error names the fix")
	t.Logf("no CA: %s", lastLine(out))

	out, err = child(fmt.Sprintf("redis://127.0.0.1:%d/0", port), caFile)
	require.Error(t, err, "a plain redis:// URL against a TLS-only port must fail: %s", out)
	require.Contains(t, string(out), "use a rediss:// URL", "the error names the fix")
	t.Logf("plain URL: %s", lastLine(out))
}

// TestTLSRedisChild is TestTLSRedis's child: it runs a front door and a
// client over the URL in RAGSYNC_TLS_CHILD.
func TestTLSRedisChild(t *testing.T) {
	url := os.Getenv("RAGSYNC_TLS_CHILD")
	if url == "" {
		t.Skip("run by TestTLSRedis")
	}
	ctx := t.Context()
	rdb, err := OpenRedis(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	b := setupTenants(t, nil) // store, embedder and a fresh prefix; its own Redis client stays unused
	serveAndAskTwice(t, b, rdb)
	t.Log("tls-child: hit and miss answered")
}

// writeTestPKI writes a CA (returned path) and a server certificate for
// 127.0.0.1 signed by it into dir.
func writeTestPKI(t *testing.T, dir string) string {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ragsync test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	require.NoError(t, err)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	write("server.pem", "CERTIFICATE", leafDER)
	write("server.key", "EC PRIVATE KEY", keyDER)
	return write("ca.pem", "CERTIFICATE", caDER)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func waitListening(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		require.True(t, time.Now().Before(deadline), "redis-server did not listen on %d: %v", port, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// lastLine is the last line of a child's output that names an error.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "connect to Redis") {
			return strings.TrimSpace(lines[i])
		}
	}
	return lines[len(lines)-1]
}
