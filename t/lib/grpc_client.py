#!/usr/bin/python3
# A gRPC client for the tests, on grpcio's generic calls with raw bytes (no
# protobuf), toward t/lib/grpc_backend.py's service test.Echo. One channel,
# that is one HTTP/2 connection, for everything a run does.
#
# usage: /usr/bin/python3 grpc_client.py [options] TARGET MODE ARGS...
#   --ca FILE        TLS (ALPN h2), trusting the CA in FILE
#   --name HOST      the TLS server name (and :authority) to use
#   --deadline SECS  each call's deadline (default 10)
# MODE:
#   unary MSG | server MSG | client MSG... | bidi MSG...
#       one call; prints "message M" per answer, "trailer K V" per trailing
#       metadata entry, "status CODE_NAME", "details D", "elapsed SECS"
#   sequence COUNT OUT [PACE]
#       COUNT unary calls one after the other (at most PACE a second, if
#       given), each a line in OUT as it ends, flushed:
#       "SECS_SINCE_START ok BACKEND" or
#       "SECS_SINCE_START fail CODE_NAME DETAILS"; first "start EPOCH_SECS",
#       "done" at the end. A file STOP beside OUT ends the run early.

import os
import sys
import time

import grpc

args = sys.argv[1:]
ca = name = None
deadline = 10.0
while args and args[0].startswith('--'):
    opt = args.pop(0)
    if opt == '--ca':
        ca = args.pop(0)
    elif opt == '--name':
        name = args.pop(0)
    elif opt == '--deadline':
        deadline = float(args.pop(0))
    else:
        sys.exit('unknown option ' + opt)
target, mode, rest = args[0], args[1], args[2:]

options = [('grpc.enable_retries', 0)]
if ca:
    with open(ca, 'rb') as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    if name:
        options.append(('grpc.ssl_target_name_override', name))
        options.append(('grpc.default_authority', name))
    channel = grpc.secure_channel(target, creds, options=options)
else:
    channel = grpc.insecure_channel(target, options=options)

ident = lambda b: b
unary = channel.unary_unary('/test.Echo/Unary', ident, ident)
server = channel.unary_stream('/test.Echo/ServerStream', ident, ident)
client = channel.stream_unary('/test.Echo/ClientStream', ident, ident)
bidi = channel.stream_stream('/test.Echo/Bidi', ident, ident)


def one():
    msgs = [m.encode() for m in rest]
    start = time.time()
    answers, call = [], None
    try:
        if mode == 'unary':
            a, call = unary.with_call(msgs[0], timeout=deadline)
            answers = [a]
        elif mode == 'client':
            a, call = client.with_call(iter(msgs), timeout=deadline)
            answers = [a]
        else:
            call = (server(msgs[0], timeout=deadline) if mode == 'server'
                    else bidi(iter(msgs), timeout=deadline))
            for a in call:
                answers.append(a)
        code, details = call.code(), call.details()
        trailers = call.trailing_metadata() or ()
    except grpc.RpcError as e:
        code, details = e.code(), e.details()
        trailers = e.trailing_metadata() or ()
    for a in answers:
        print('message', a.decode())
    for k, v in trailers:
        print('trailer', k, v if isinstance(v, str) else v.decode())
    print('status', code.name)
    print('details', details or '')
    print('elapsed', '%.3f' % (time.time() - start))


def sequence():
    count, out = int(rest[0]), rest[1]
    pace = float(rest[2]) if len(rest) > 2 else 0
    stop = os.path.join(os.path.dirname(out) or '.', 'STOP')
    start = time.time()
    with open(out, 'w') as f:
        f.write('start %.3f\n' % start)
        for i in range(count):
            if os.path.exists(stop):
                break
            if pace:
                time.sleep(max(0.0, start + i / pace - time.time()))
            try:
                a = unary(b'n%d' % i, timeout=deadline)
                line = 'ok ' + a.split(b':', 1)[0].decode()
            except grpc.RpcError as e:
                details = (e.details() or '').replace('\n', ' ')
                line = 'fail %s %s' % (e.code().name, details)
            f.write('%.3f %s\n' % (time.time() - start, line))
            f.flush()
        f.write('done\n')


if mode == 'sequence':
    sequence()
else:
    one()
channel.close()
