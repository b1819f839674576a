package srtest_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ragsync/ragsync/cdc/registry/srtest"
)

// TestServesTheClientAPI drives the server with franz-go's registry
// client, the one ragsync uses, through every call the server answers.
func TestServesTheClientAPI(t *testing.T) {
	t.Parallel()
	srv := srtest.New(t, srtest.Options{})
	cl, err := sr.NewClient(sr.URLs(srv.URL()))
	require.NoError(t, err)
	ctx := t.Context()

	const v1 = `{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}`
	const v2 = `{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"string","default":""}]}`
	id1, err := cl.RegisterSchema(ctx, "t-value", sr.Schema{Schema: v1}, -1, -1)
	require.NoError(t, err)
	again, err := cl.RegisterSchema(ctx, "t-value", sr.Schema{Schema: v1}, -1, -1)
	require.NoError(t, err)
	require.Equal(t, id1, again, "the same schema keeps its id")
	id2, err := cl.RegisterSchema(ctx, "t-value", sr.Schema{Schema: v2}, -1, -1)
	require.NoError(t, err)
	require.NotEqual(t, id1, id2)
	shared, err := cl.RegisterSchema(ctx, "u-value", sr.Schema{Schema: v1}, -1, -1)
	require.NoError(t, err)
	require.Equal(t, id1, shared, "the same schema has one id in every subject")
	proto := srv.Register("p-value", "PROTOBUF", `syntax = "proto3"; message M { int32 a = 1; }`,
		srtest.Reference{Name: "dep.proto", Subject: "dep", Version: 1})

	s, err := cl.SchemaByID(ctx, id1)
	require.NoError(t, err)
	require.Equal(t, sr.Schema{Schema: v1, Type: sr.TypeAvro}, s)
	s, err = cl.SchemaByID(ctx, proto)
	require.NoError(t, err)
	require.Equal(t, sr.TypeProtobuf, s.Type)
	require.Equal(t, []sr.SchemaReference{{Name: "dep.proto", Subject: "dep", Version: 1}}, s.References)

	text, err := cl.SchemaTextByID(ctx, id2)
	require.NoError(t, err)
	require.Equal(t, v2, text)

	svs, err := cl.SchemaVersionsByID(ctx, id1)
	require.NoError(t, err)
	require.Equal(t, []sr.SubjectVersion{{Subject: "t-value", Version: 1}, {Subject: "u-value", Version: 1}}, svs)
	subjects, err := cl.SubjectsByID(ctx, id1)
	require.NoError(t, err)
	require.Equal(t, []string{"t-value", "u-value"}, subjects)
	usages, err := cl.SchemaUsagesByID(ctx, id1)
	require.NoError(t, err)
	require.Len(t, usages, 2)

	all, err := cl.Subjects(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"p-value", "t-value", "u-value"}, all)
	versions, err := cl.SubjectVersions(ctx, "t-value")
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, versions)
	latest, err := cl.SchemaByVersion(ctx, "t-value", -1)
	require.NoError(t, err)
	require.Equal(t, sr.SubjectSchema{Subject: "t-value", Version: 2, ID: id2, Schema: sr.Schema{Schema: v2, Type: sr.TypeAvro}}, latest)
	first, err := cl.SchemaByVersion(ctx, "t-value", 1)
	require.NoError(t, err)
	require.Equal(t, id1, first.ID)

	// The registry's errors, with their codes.
	for _, tc := range []struct {
		name string
		call func() error
		code int
	}{
		{"unknown id", func() error { _, err := cl.SchemaByID(ctx, 99); return err }, 40403},
		{"unknown subject", func() error { _, err := cl.SubjectVersions(ctx, "nosuch"); return err }, 40401},
		{"unknown version", func() error { _, err := cl.SchemaByVersion(ctx, "t-value", 7); return err }, 40402},
	} {
		var re *sr.ResponseError
		require.True(t, errors.As(tc.call(), &re), tc.name)
		require.Equal(t, http.StatusNotFound, re.StatusCode, tc.name)
		require.Equal(t, tc.code, re.ErrorCode, tc.name)
	}
}

func TestFaultsAndAuth(t *testing.T) {
	t.Parallel()
	srv := srtest.New(t, srtest.Options{BearerToken: "tok", TLS: true})
	require.Contains(t, string(srv.CAPEM()), "BEGIN CERTIFICATE")
	httpcl := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsFor(t, srv)}}
	get := func(token string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL()+"/subjects", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpcl.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	resp := get("")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, srtest.ContentType, resp.Header.Get("Content-Type"))
	body, _ := io.ReadAll(resp.Body)
	require.JSONEq(t, `{"error_code":401,"message":"Unauthorized"}`, string(body))
	require.Equal(t, http.StatusOK, get("tok").StatusCode)

	srv.SetDown(true)
	resp = get("tok")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	body, _ = io.ReadAll(resp.Body)
	require.Contains(t, string(body), `"error_code":50003`)
	srv.SetDown(false)

	srv.SetFail("/subjects", 429)
	require.Equal(t, http.StatusTooManyRequests, get("tok").StatusCode)
	srv.SetFail("/subjects", 0)
	require.Equal(t, http.StatusOK, get("tok").StatusCode)

	srv.SetDropConnections(true)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL()+"/subjects", nil)
	require.NoError(t, err)
	_, err = httpcl.Do(req)
	require.Error(t, err, "the connection is closed without an answer")
	srv.SetDropConnections(false)

	require.Equal(t, 6, srv.Requests())
	require.Equal(t, 6, srv.RequestsTo("/subjects"))
	require.Zero(t, srv.RequestsTo("/schemas/ids/1"))
	require.Equal(t, []byte{0, 0, 0, 1, 2, 0xaa}, srtest.Frame(258, []byte{0xaa}))
}

func tlsFor(t *testing.T, srv *srtest.Server) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(srv.CAPEM()))
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
