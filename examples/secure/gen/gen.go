// Package gen makes the files examples/secure needs and must not ship: a
// CA, a server certificate for 127.0.0.1 and localhost, a client
// certificate, and an nkey for the globex tenant's user, with the two
// nats-server configuration fragments that name them (keys.conf, tls.conf).
// For the example and the security spec only: the keys are fresh, and a
// real deployment brings its own.
package gen

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
	"path/filepath"
	"time"

	"github.com/nats-io/nkeys"
)

// Files are the paths Generate wrote.
type Files struct {
	Dir                       string
	CA, ServerCert, ServerKey string
	ClientCert, ClientKey     string
	GlobexSeed                string // globex's nkey seed file
	GlobexPublic              string // its public key
	KeysConf, TLSConf         string
}

// Generate writes the files into dir (made if missing).
func Generate(dir string) (Files, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Files{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, err
	}
	f := Files{Dir: dir}
	p := func(name string) string { return filepath.Join(dir, name) }
	f.CA, f.ServerCert, f.ServerKey = p("ca.pem"), p("server.pem"), p("server-key.pem")
	f.ClientCert, f.ClientKey = p("client.pem"), p("client-key.pem")
	f.GlobexSeed, f.KeysConf, f.TLSConf = p("globex.nk"), p("keys.conf"), p("tls.conf")

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "braid example CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Files{}, err
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return Files{}, err
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyPath, "EC PRIVATE KEY", kb)
	}
	if err := leaf(2, "braid server", x509.ExtKeyUsageServerAuth, f.ServerCert, f.ServerKey); err != nil {
		return Files{}, err
	}
	if err := leaf(3, "braid client", x509.ExtKeyUsageClientAuth, f.ClientCert, f.ClientKey); err != nil {
		return Files{}, err
	}

	user, err := nkeys.CreateUser()
	if err != nil {
		return Files{}, err
	}
	seed, err := user.Seed()
	if err != nil {
		return Files{}, err
	}
	if f.GlobexPublic, err = user.PublicKey(); err != nil {
		return Files{}, err
	}
	if err := os.WriteFile(f.GlobexSeed, append(seed, '\n'), 0o600); err != nil {
		return Files{}, err
	}
	if err := os.WriteFile(f.KeysConf, fmt.Appendf(nil, "# made by examples/secure/setup\nGLOBEX_NKEY: %q\n", f.GlobexPublic), 0o600); err != nil {
		return Files{}, err
	}
	tlsConf := fmt.Sprintf("# made by examples/secure/setup: TLS only on the client listener\ntls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  timeout: 2\n}\n",
		f.ServerCert, f.ServerKey, f.CA)
	if err := os.WriteFile(f.TLSConf, []byte(tlsConf), 0o600); err != nil {
		return Files{}, err
	}
	return f, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
