#!/usr/bin/python3
# A gRPC backend for the tests, on grpcio's generic handlers with raw bytes
# (no protobuf): service test.Echo, methods Unary, ServerStream (three
# answers), ClientStream (the messages joined by "|") and Bidi (one answer
# per message). Every answer starts with the backend's NAME and ":", and
# every call ends with trailer x-backend: NAME, so a test sees which backend
# answered.
#
# usage: /usr/bin/python3 grpc_backend.py PORT MODE NAME [READY_FILE [HEALTH_FILE]]
#   MODE ok:          answers
#   MODE unavailable: every call ends at once with UNAVAILABLE (Trailers-Only)
#   MODE slow:        answers after 3 seconds
# READY_FILE is created once the server listens. With HEALTH_FILE the
# backend also serves grpc.health.v1.Health/Check (request and response
# encoded here by hand): each call reads HEALTH_FILE, lines "SERVICE
# ANSWER" (SERVICE "-" is the empty name; ANSWER SERVING, NOT_SERVING,
# UNKNOWN, or GARBLED: a truncated message), answers a service not listed
# with NOT_FOUND as the real health service does, and appends the service
# asked for to HEALTH_FILE.log. Without it the health service is not there
# (UNIMPLEMENTED). With SLUICE_GRPC_HEALTH_LIB=1 in the environment the
# health service is instead grpcio-health-checking's own HealthServicer
# (PyPI's package, in scripts/test's venv), its statuses set from
# HEALTH_FILE every 50 ms (SERVING, NOT_SERVING or UNKNOWN; a service not
# listed is one the servicer never heard of), and HEALTH_FILE.lib created
# to say so. SIGTERM stops it
# gracefully, as a rolling restart does: no new call, GOAWAY on its
# connections, the calls in flight finish (for at most a second).

import os
import signal
import sys
import time
from concurrent import futures

import grpc

port, mode, name = sys.argv[1], sys.argv[2], sys.argv[3]
ready = sys.argv[4] if len(sys.argv) > 4 else None
health = sys.argv[5] if len(sys.argv) > 5 else None
tag = name.encode()


def check(ctx):
    ctx.set_trailing_metadata((('x-backend', name),))
    if mode == 'unavailable':
        ctx.abort(grpc.StatusCode.UNAVAILABLE, name + ' unavailable')
    if mode == 'slow':
        time.sleep(3)


def unary(req, ctx):
    check(ctx)
    return tag + b':' + req


def server_stream(req, ctx):
    check(ctx)
    for i in range(3):
        yield tag + b':' + str(i).encode() + b':' + req


def client_stream(it, ctx):
    check(ctx)
    return tag + b':' + b'|'.join(it)


def bidi(it, ctx):
    check(ctx)
    for m in it:
        yield tag + b':' + m


handlers = {
    'Unary': grpc.unary_unary_rpc_method_handler(unary),
    'ServerStream': grpc.unary_stream_rpc_method_handler(server_stream),
    'ClientStream': grpc.stream_unary_rpc_method_handler(client_stream),
    'Bidi': grpc.stream_stream_rpc_method_handler(bidi),
}

def varint(b, i):
    v, shift = 0, 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7f) << shift
        shift += 7
        if not x & 0x80:
            return v, i


def health_check(req, ctx):
    service = ''
    if req[:1] == b'\x0a':
        n, i = varint(req, 1)
        service = req[i:i + n].decode()
    with open(health + '.log', 'a') as log:
        log.write((service or '-') + '\n')
    answers = {}
    try:
        with open(health) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    answers[parts[0]] = parts[1]
    except OSError:
        pass
    answer = answers.get(service or '-')
    if answer is None:
        ctx.abort(grpc.StatusCode.NOT_FOUND, 'unknown service')
    return {'SERVING': b'\x08\x01', 'NOT_SERVING': b'\x08\x02',
            'UNKNOWN': b'', 'GARBLED': b'\x08'}[answer]


server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
server.add_generic_rpc_handlers(
    (grpc.method_handlers_generic_handler('test.Echo', handlers),))
def health_from_library():
    import threading
    from grpc_health.v1 import health as health_lib
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    servicer = health_lib.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    status = health_pb2.HealthCheckResponse.ServingStatus

    def follow():
        seen = None
        while True:
            try:
                with open(health) as f:
                    text = f.read()
            except OSError:
                text = ''
            if text != seen:
                seen = text
                for line in text.splitlines():
                    parts = line.split()
                    if len(parts) == 2:
                        service = '' if parts[0] == '-' else parts[0]
                        servicer.set(service, status.Value(parts[1]))
            time.sleep(0.05)

    threading.Thread(target=follow, daemon=True).start()
    # For the tests: the library's servicer answers here.
    open(health + '.lib', 'w').close()


if health and os.environ.get('SLUICE_GRPC_HEALTH_LIB') == '1':
    health_from_library()
elif health:
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        'grpc.health.v1.Health',
        {'Check': grpc.unary_unary_rpc_method_handler(health_check)}),))
server.add_insecure_port('127.0.0.1:' + port)
server.start()
signal.signal(signal.SIGTERM, lambda *_: server.stop(1))
if ready:
    open(ready, 'w').close()
server.wait_for_termination()
