"""Operations (issue 19, item 6): the gRPC health service on the Flight port."""

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
import pyarrow.flight as flight

FLIGHT_SERVICE = "arrow.flight.protocol.FlightService"


def health(port: int, service: str):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)


def test_grpc_health_answers_without_credentials_while_flight_requires_them(start_daemon):
    """grpc.health.v1 (Kubernetes' gRPC probes) on the Flight port: SERVING for the server and
    the Flight service, NOT_FOUND for a service it does not have; probes carry no token, so the
    health service is outside authentication, while Flight calls still need the token."""
    d = start_daemon("--auth-token", "s3cret")
    for service in ("", FLIGHT_SERVICE):
        assert health(d.port, service).status == health_pb2.HealthCheckResponse.SERVING, service
    with pytest.raises(grpc.RpcError) as error:
        health(d.port, "no.such.Service")
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(d.client().list_flights())
