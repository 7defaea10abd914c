"""Certificates for a test cluster, made with the openssl command line: one CA
and leaf certificates (P-256, serverAuth and clientAuth) whose subject
alternative names are the DNS names and IP addresses given.

    ca = CertificateAuthority(folder)
    cert, key = ca.issue("worker-0", dns=["lact-worker-0.example"], ips=["10.231.0.3"])
    ca.cert  # the CA's PEM file
"""

import os
import subprocess


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, text=True)


class CertificateAuthority:
    def __init__(self, folder):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.key = os.path.join(folder, "ca.key")
        self.cert = os.path.join(folder, "ca.crt")
        self._serial = 1
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", self.key, "-out", self.cert, "-days", "2",
                 "-subj", "/CN=lact test CA",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign")

    def issue(self, name, dns=(), ips=()):
        """(certificate path, key path) for `name`, valid for the names given."""
        key = os.path.join(self.folder, f"{name}.key")
        csr = os.path.join(self.folder, f"{name}.csr")
        cert = os.path.join(self.folder, f"{name}.crt")
        ext = os.path.join(self.folder, f"{name}.ext")
        sans = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\n"
                    "extendedKeyUsage=serverAuth,clientAuth\n"
                    f"subjectAltName={','.join(sans)}\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
        self._serial += 1
        _openssl("x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key,
                 "-set_serial", str(self._serial), "-days", "2", "-extfile", ext, "-out", cert)
        return cert, key
