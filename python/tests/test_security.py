"""`sluice connect --token` and `--tls-cert/--tls-key` driven by the real pyspark-client 4.2, in
the combinations its `DefaultChannelBuilder` makes:

* `sc://localhost:PORT/;token=T` (or `SPARK_CONNECT_AUTHENTICATE_TOKEN=T`): without TLS, as gRPC
  local credentials (plain TCP to loopback), sending `authorization: Bearer T`;
* `sc://HOST:PORT/;use_ssl=true;token=T`: TLS, trusting the server's certificate through gRPC's
  `GRPC_DEFAULT_SSL_ROOTS_FILE_PATH` (a self-signed one made here with openssl);
* `sc://127.0.0.1:PORT/;token=T` on a server without TLS: the client insists on TLS and fails;
* no token, a wrong token: refused with UNAUTHENTICATED, a message about authentication;
* a plain client to a TLS server: fails.

A foreachBatch query runs on a server with a token and TLS: its Python worker reaches the
server on the server's own loopback port for its workers, with the server's token for them.
"""
import json
import os
import subprocess
import tempfile
import uuid

import pytest

import servers
from conftest import ENGINE, close_session

pytestmark = pytest.mark.skipif(
    ENGINE != "sluice" or bool(os.environ.get("SLUICE_CONNECT_URL")),
    reason="starts `sluice connect` servers with flags of its own")

TOKEN = "tok-" + uuid.uuid4().hex

# gRPC reads its default roots once, when the process makes its first TLS channel (a client
# given a token to 127.0.0.1 makes one too): they are this file from the start.
CERT_DIR = tempfile.mkdtemp(prefix="sluice-tls-")
os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = os.path.join(CERT_DIR, "server.pem")


@pytest.fixture(scope="module")
def cert():
    """A self-signed certificate for 127.0.0.1 and localhost, which this process's gRPC trusts
    (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH); made before any test makes a TLS channel."""
    import pathlib

    d = pathlib.Path(CERT_DIR)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-addext", "basicConstraints=critical,CA:FALSE",
         "-addext", "extendedKeyUsage=serverAuth",
         "-keyout", str(d / "server.key"), "-out", str(d / "server.pem")],
        check=True, capture_output=True)
    return d


def start(tmp_path, name, args, env=None):
    srv = servers.Server("sluice", log_path=str(tmp_path / ("%s.log" % name)), cwd=str(tmp_path),
                         extra_args=args)
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        srv.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return srv


@pytest.fixture
def token_server(tmp_path):
    # the token from the environment, as `SLUICE_CONNECT_TOKEN`
    srv = start(tmp_path, "token", [], env={"SLUICE_CONNECT_TOKEN": TOKEN})
    yield srv
    srv.stop()


@pytest.fixture
def tls_server(tmp_path, cert):
    srv = start(tmp_path, "tls", ["--token", TOKEN, "--tls-cert", str(cert / "server.pem"),
                                  "--tls-key", str(cert / "server.key")])
    yield srv
    srv.stop()


def session(url):
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).create()
    # a refused connection is UNAVAILABLE, which the client would retry for ~10 minutes
    spark.client.set_retry_policies([])
    return spark


def query_works(url):
    spark = session(url)
    try:
        return [r.n for r in spark.sql("SELECT 40 + 2 AS n").collect()]
    finally:
        close_session(spark)


def refusal(url):
    """The exception a query on `url` raises (it must raise)."""
    spark = session(url)
    try:
        with pytest.raises(Exception) as e:
            spark.sql("SELECT 1 AS n").collect()
        return str(e.value)
    finally:
        close_session(spark)


def test_the_token_as_the_client_sends_it_runs_a_query(cert, token_server, monkeypatch):
    port = token_server.port
    assert query_works("sc://localhost:%d/;token=%s" % (port, TOKEN)) == [42]
    monkeypatch.setenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", TOKEN)
    assert query_works("sc://localhost:%d" % port) == [42]


def test_without_the_token_or_with_another_the_server_refuses(cert, token_server):
    port = token_server.port
    missing = refusal("sc://127.0.0.1:%d" % port)
    assert "authentication" in missing.lower() and "UNAUTHENTICATED" in missing, missing
    assert "carried none" in missing, missing
    wrong = refusal("sc://localhost:%d/;token=not-%s" % (port, TOKEN))
    assert "authentication" in wrong.lower() and "UNAUTHENTICATED" in wrong, wrong
    assert TOKEN not in wrong, wrong
    assert "not this server's" in wrong, wrong


def test_a_token_to_another_host_than_localhost_makes_the_client_use_tls(cert, token_server):
    # pyspark-client sends a token over TLS only (except to `localhost`): a server without
    # TLS cannot be reached as 127.0.0.1 with a token.
    err = refusal("sc://127.0.0.1:%d/;token=%s" % (token_server.port, TOKEN))
    assert "UNAVAILABLE" in err or "SSL" in err or "ssl" in err, err


def test_over_tls_with_the_token_a_query_and_a_foreach_batch_run(tls_server, tmp_path):
    url = "sc://127.0.0.1:%d/;use_ssl=true;token=%s" % (tls_server.port, TOKEN)
    assert query_works(url) == [42]
    spark = session(url)
    try:
        src, out = tmp_path / "in", tmp_path / "out"
        src.mkdir()
        with open(src / "0.json", "w") as fh:
            fh.writelines(json.dumps({"id": i}) + "\n" for i in range(3))
        out_path = str(out)

        def copy(df, batch_id):
            df.write.mode("append").json(out_path)

        q = (spark.readStream.schema("id INT").json(str(src)).writeStream.foreachBatch(copy)
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(120), "the query did not end"
        assert q.exception() is None, q.exception()
        assert sorted(r.id for r in spark.read.schema("id INT").json(out_path).collect()) \
            == [0, 1, 2], tls_server.log_tail()
    finally:
        close_session(spark)


def test_a_tls_server_refuses_plain_clients_and_clients_without_the_token(tls_server):
    port = tls_server.port
    plain = refusal("sc://127.0.0.1:%d" % port)
    assert "UNAVAILABLE" in plain, plain
    untokened = refusal("sc://127.0.0.1:%d/;use_ssl=true" % port)
    assert "authentication" in untokened.lower() and "UNAUTHENTICATED" in untokened, untokened
