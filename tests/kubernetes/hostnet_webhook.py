"""A mutating admission webhook on 127.0.0.1: every pod with a `job-name` label gets hostNetwork.

The test cluster has no pod network (dockerd runs with --bridge=none, nothing may leave loopback), and
the executor plugin sets no hostNetwork, so this is how a pod reaches the S3 server on 127.0.0.1.
  python3 hostnet_webhook.py CERT KEY PORT
"""

import base64
import http.server
import json
import ssl
import sys

PATCH = base64.b64encode(
    json.dumps(
        [
            {"op": "add", "path": "/spec/hostNetwork", "value": True},
            {"op": "add", "path": "/spec/dnsPolicy", "value": "Default"},
        ]
    ).encode()
).decode()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        response = {"uid": review["request"]["uid"], "allowed": True, "patchType": "JSONPatch", "patch": PATCH}
        body = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    cert, key, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()
