package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback in front of a service, for fault tests:
// Cut drops every proxied connection and refuses new ones (the service is
// "unreachable"), Restore lets connections through again, and Retarget
// points it at another backend (a failover behind a stable address, as a
// Kubernetes Service does).
type Proxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to target ("host:port"); it stops when the test
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.dropLocked()
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Retarget sends new connections to target and drops the current ones.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	p.dropLocked()
}

func (p *Proxy) dropLocked() {
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.dropLocked()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut, target := p.cut, p.target
		p.mu.Unlock()
		if cut {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(out, in)
		go pipe(in, out)
	}
}
