// gitserver serves a directory of bare Git repositories over plain (smart) HTTP, by running
// `git http-backend` as a CGI program for each request. It is the Git server that Flux's
// source-controller clones from in convoy's benchmarks against Flux (benches/peers/README.md).
//
//	gitserver --root DIR [--listen 127.0.0.1:0] [--addr-file FILE] [--allow-push]
//
// A bare repository DIR/NAME.git is served at http://ADDR/NAME.git. With --listen on port 0 the
// kernel picks a free port; the address is printed on stdout as
// `gitserver: serving DIR at http://127.0.0.1:PORT` and, with --addr-file, written to that file
// (host:port, no newline) once the server accepts connections.
//
// Only the standard library is used, so it builds with any recent Go; it needs `git` on PATH.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"
)

func main() {
	root := flag.String("root", "", "directory holding bare repositories (NAME.git)")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (port 0 picks a free port)")
	addrFile := flag.String("addr-file", "", "write the listening host:port to this file once ready")
	allowPush := flag.Bool("allow-push", false, "allow git push (receive-pack) without authentication")
	quiet := flag.Bool("quiet", false, "do not log each request")
	flag.Parse()
	if *root == "" {
		log.Fatal("gitserver: --root is required")
	}
	abs, err := filepath.Abs(*root)
	if err != nil {
		log.Fatalf("gitserver: %v", err)
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		log.Fatalf("gitserver: --root %s is not a directory", abs)
	}
	gitPath, err := exec.LookPath("git")
	if err != nil {
		log.Fatal("gitserver: git is not on PATH")
	}

	env := []string{
		"GIT_PROJECT_ROOT=" + abs,
		"GIT_HTTP_EXPORT_ALL=1",
	}
	if *allowPush {
		// http-backend refuses receive-pack for anonymous users unless http.receivepack is set.
		env = append(env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.receivepack", "GIT_CONFIG_VALUE_0=true")
	}
	backend := &cgi.Handler{
		Path: gitPath,
		Args: []string{"http-backend"},
		Root: "/",
		Env:  env,
		// Keep HOME/PATH so git finds its helpers; nothing else of ours leaks in.
		InheritEnv: []string{"PATH", "HOME"},
		Stderr:     os.Stderr,
	}

	var requests atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			fmt.Fprintln(w, "ok")
			return
		}
		start := time.Now()
		// git http-backend itself maps HTTP_GIT_PROTOCOL (the Git-Protocol header) to
		// GIT_PROTOCOL, so protocol v2 works without help here.
		backend.ServeHTTP(w, r)
		n := requests.Add(1)
		if !*quiet {
			log.Printf("gitserver: #%d %s %s?%s %s", n, r.Method, r.URL.Path, r.URL.RawQuery, time.Since(start).Round(time.Microsecond))
		}
	})

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("gitserver: listen %s: %v", *listen, err)
	}
	addr := ln.Addr().String()
	if *addrFile != "" {
		tmp := *addrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(addr), 0o644); err != nil {
			log.Fatalf("gitserver: %v", err)
		}
		if err := os.Rename(tmp, *addrFile); err != nil {
			log.Fatalf("gitserver: %v", err)
		}
	}
	fmt.Printf("gitserver: serving %s at http://%s\n", abs, addr)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	log.Fatal(srv.Serve(ln))
}
