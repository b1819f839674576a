// Package srtest serves a Confluent-compatible schema registry over HTTP for
// tests, as kfake serves Kafka: real JSON on a real socket, the REST calls a
// registry client makes to register and read schemas, the registry's error
// bodies and content type, and injectable faults (an outage that answers
// 503 or drops connections, required credentials, TLS). It must not be
// imported by the service's own code: only tests and benchmarks use it.
package srtest

import (
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// ContentType is the registry's media type, on every answer.
const ContentType = "application/vnd.schemaregistry.v1+json"

// Options configure a Server. The zero value serves plain HTTP without
// authentication.
type Options struct {
	// Username and Password, if set, are required as HTTP basic auth;
	// otherwise the answer is 401.
	Username, Password string
	// BearerToken, if set, is required as "Authorization: Bearer <token>";
	// otherwise the answer is 401.
	BearerToken string
	// TLS serves HTTPS with a certificate signed by a test CA (see CAPEM).
	TLS bool
}

// Reference is a schema's reference to another, by subject and version.
type Reference struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

type schema struct {
	Type string // AVRO, PROTOBUF or JSON
	Text string
	Refs []Reference
}

type version struct {
	id, version int
}

// Server is a running test registry. Its methods are safe for concurrent
// use.
type Server struct {
	srv  *httptest.Server
	opts Options

	mu       sync.Mutex
	schemas  []schema             // id-1 → schema
	subjects map[string][]version // subject → versions, ascending

	fails    sync.Map // path → HTTP status to answer
	down     atomic.Bool
	drop     atomic.Bool
	requests atomic.Int64
	byPath   sync.Map // path → *atomic.Int64
}

// New starts a registry and closes it when the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	s := Start(opts)
	t.Cleanup(s.Close)
	return s
}

// Start starts a registry outside a test (a benchmark's); Close stops it.
func Start(opts Options) *Server {
	s := &Server{opts: opts, subjects: map[string][]version{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /schemas/ids/{id}", s.schemaByID)
	mux.HandleFunc("GET /schemas/ids/{id}/schema", s.schemaTextByID)
	mux.HandleFunc("GET /schemas/ids/{id}/versions", s.versionsByID)
	mux.HandleFunc("GET /schemas/ids/{id}/subjects", s.subjectsByID)
	mux.HandleFunc("GET /subjects", s.listSubjects)
	mux.HandleFunc("GET /subjects/{subject}/versions", s.subjectVersions)
	mux.HandleFunc("GET /subjects/{subject}/versions/{version}", s.subjectVersion)
	mux.HandleFunc("POST /subjects/{subject}/versions", s.register)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, 404, "HTTP 404 Not Found")
	})
	s.srv = httptest.NewUnstartedServer(s.middleware(mux))
	// A client refusing the test CA is a case tests provoke: keep the
	// server's handshake errors out of the test output.
	s.srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	if opts.TLS {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	return s
}

// Close stops the registry.
func (s *Server) Close() { s.srv.Close() }

// URL is the registry's base URL.
func (s *Server) URL() string { return s.srv.URL }

// CAPEM is the PEM certificate that signs the server's certificate (with
// Options.TLS), for a client's CA file.
func (s *Server) CAPEM() []byte {
	if s.srv.Certificate() == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
}

// SetDown starts (true) or ends an outage in which every request is
// answered 503 with the registry's error body, as a registry that lost its
// backing Kafka cluster does.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// SetDropConnections starts (true) or ends an outage in which every
// connection is closed without an answer, as behind a failing proxy.
func (s *Server) SetDropConnections(drop bool) { s.drop.Store(drop) }

// SetFail makes the server answer every request for path (such as
// "/schemas/ids/1/versions") with status and the registry's error body;
// status 0 serves the path again.
func (s *Server) SetFail(path string, status int) {
	if status == 0 {
		s.fails.Delete(path)
		return
	}
	s.fails.Store(path, status)
}

// Requests is how many requests the server received, answered or not.
func (s *Server) Requests() int { return int(s.requests.Load()) }

// RequestsTo is how many requests the server received for path (such as
// "/schemas/ids/1").
func (s *Server) RequestsTo(path string) int {
	if n, ok := s.byPath.Load(path); ok {
		return int(n.(*atomic.Int64).Load())
	}
	return 0
}

// Register registers a schema of type typ (AVRO, PROTOBUF or JSON; "" is
// AVRO) under subject, as POST /subjects/{subject}/versions does, and
// returns its id. The same schema gets the same id under every subject,
// and registering it again under the same subject adds no version.
func (s *Server) Register(subject, typ, text string, refs ...Reference) int {
	if typ == "" {
		typ = "AVRO"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := schema{Type: typ, Text: text, Refs: refs}
	id := 0
	for i, have := range s.schemas {
		if have.Type == sc.Type && have.Text == sc.Text && slices.Equal(have.Refs, sc.Refs) {
			id = i + 1
			break
		}
	}
	if id == 0 {
		s.schemas = append(s.schemas, sc)
		id = len(s.schemas)
	}
	vs := s.subjects[subject]
	for _, v := range vs {
		if v.id == id {
			return id
		}
	}
	s.subjects[subject] = append(vs, version{id: id, version: len(vs) + 1})
	return id
}

// Frame writes body in the registry's wire format: byte 0, the schema id
// as a four-byte big-endian integer, then body.
func Frame(id int, body []byte) []byte {
	out := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(out[1:], uint32(id))
	return append(out, body...)
}

func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		n, _ := s.byPath.LoadOrStore(r.URL.Path, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if s.drop.Load() {
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.(net.Conn).Close()
					return
				}
			}
		}
		if s.down.Load() {
			writeError(w, http.StatusServiceUnavailable, 50003, "Error while forwarding the request to the leader")
			return
		}
		if status, ok := s.fails.Load(r.URL.Path); ok {
			writeError(w, status.(int), status.(int)*100, http.StatusText(status.(int)))
			return
		}
		if !s.authorized(r) {
			writeError(w, http.StatusUnauthorized, 401, "Unauthorized")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) authorized(r *http.Request) bool {
	switch {
	case s.opts.BearerToken != "":
		return r.Header.Get("Authorization") == "Bearer "+s.opts.BearerToken
	case s.opts.Username != "" || s.opts.Password != "":
		u, p, ok := r.BasicAuth()
		return ok && u == s.opts.Username && p == s.opts.Password
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with the registry's error body.
func writeError(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{"error_code": code, "message": msg})
}

// byID returns the schema of the request's id, or answers 40403.
func (s *Server) byID(w http.ResponseWriter, r *http.Request) (schema, int, bool) {
	id, err := strconv.Atoi(r.PathValue("id"))
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || id < 1 || id > len(s.schemas) {
		writeError(w, http.StatusNotFound, 40403, "Schema "+r.PathValue("id")+" not found")
		return schema{}, 0, false
	}
	return s.schemas[id-1], id, true
}

// schemaJSON is a schema as the registry writes it: schemaType is left out
// for Avro, references when there are none.
func schemaJSON(sc schema, extra map[string]any) map[string]any {
	out := map[string]any{"schema": sc.Text}
	if sc.Type != "AVRO" {
		out["schemaType"] = sc.Type
	}
	if len(sc.Refs) > 0 {
		out["references"] = sc.Refs
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func (s *Server) schemaByID(w http.ResponseWriter, r *http.Request) {
	if sc, _, ok := s.byID(w, r); ok {
		writeJSON(w, http.StatusOK, schemaJSON(sc, nil))
	}
}

func (s *Server) schemaTextByID(w http.ResponseWriter, r *http.Request) {
	if sc, _, ok := s.byID(w, r); ok {
		w.Header().Set("Content-Type", ContentType)
		_, _ = w.Write([]byte(sc.Text))
	}
}

// usages lists the subject versions of id, by subject.
func (s *Server) usages(id int) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.subjects))
	for name := range s.subjects {
		names = append(names, name)
	}
	slices.Sort(names)
	out := []map[string]any{}
	for _, name := range names {
		for _, v := range s.subjects[name] {
			if v.id == id {
				out = append(out, map[string]any{"subject": name, "version": v.version})
			}
		}
	}
	return out
}

func (s *Server) versionsByID(w http.ResponseWriter, r *http.Request) {
	if _, id, ok := s.byID(w, r); ok {
		writeJSON(w, http.StatusOK, s.usages(id))
	}
}

func (s *Server) subjectsByID(w http.ResponseWriter, r *http.Request) {
	if _, id, ok := s.byID(w, r); ok {
		out := []string{}
		for _, u := range s.usages(id) {
			if name := u["subject"].(string); !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func (s *Server) listSubjects(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	names := make([]string, 0, len(s.subjects))
	for name := range s.subjects {
		names = append(names, name)
	}
	s.mu.Unlock()
	slices.Sort(names)
	writeJSON(w, http.StatusOK, names)
}

func (s *Server) subjectVersions(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("subject")
	s.mu.Lock()
	vs, ok := s.subjects[name]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, 40401, fmt.Sprintf("Subject '%s' not found.", name))
		return
	}
	out := make([]int, len(vs))
	for i, v := range vs {
		out[i] = v.version
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) subjectVersion(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("subject")
	s.mu.Lock()
	vs, ok := s.subjects[name]
	schemas := s.schemas
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, 40401, fmt.Sprintf("Subject '%s' not found.", name))
		return
	}
	want := r.PathValue("version")
	var found *version
	if want == "latest" || want == "-1" {
		found = &vs[len(vs)-1]
	} else if n, err := strconv.Atoi(want); err == nil {
		for i := range vs {
			if vs[i].version == n {
				found = &vs[i]
			}
		}
	} else {
		writeError(w, http.StatusUnprocessableEntity, 42202, "The specified version '"+want+"' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"")
		return
	}
	if found == nil {
		writeError(w, http.StatusNotFound, 40402, "Version "+want+" not found.")
		return
	}
	writeJSON(w, http.StatusOK, schemaJSON(schemas[found.id-1], map[string]any{
		"subject": name, "version": found.version, "id": found.id,
	}))
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Schema     string      `json:"schema"`
		SchemaType string      `json:"schemaType"`
		References []Reference `json:"references"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Schema == "" {
		writeError(w, http.StatusUnprocessableEntity, 42201, "Invalid schema")
		return
	}
	id := s.Register(r.PathValue("subject"), req.SchemaType, req.Schema, req.References...)
	writeJSON(w, http.StatusOK, map[string]any{"id": id})
}
