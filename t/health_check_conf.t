#!/usr/bin/perl

# health_check, health_check_timeout and match as -t checks them: errors
# with file:line, NGINX Plus's message for an upstream without a zone.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy stream/)->plan(19);
my $d = $t->testdir();

# -t on an http config: $top at http level (line 3), $loc in the location
# (line 6); the upstream has a zone unless $nozone. (exit code, stderr)
sub check {
	my ($top, $loc, $nozone) = @_;
	my $zone = $nozone ? '' : 'zone z 64k;';
	$t->write_file('t.conf', "events { }\nhttp {\n$top\n"
		. "upstream u { $zone server 127.0.0.1:1; }\nserver {\n"
		. "location / { $loc }\n}\n}\n");
	my ($rc, undef, $err) = $t->run_binary('-p', "$d/", '-c', 't.conf', '-e', 'stderr', '-t');
	return ($rc, $err);
}

sub emerg {
	my ($top, $loc, $line, $re, $name, $nozone) = @_;
	my (undef, $err) = check($top, $loc, $nozone);
	like($err, qr/\[emerg\] \d+#0: $re in \Q$d\E\/t\.conf:$line\b/, $name);
}

my ($rc, $err) = check('match m { status ! 500 502-504; header Content-Type ~ html; '
	. 'header X-A = b; header X-B != c; header X-C !~ x; header X-D; header ! X-E; '
	. 'body ~ "ok"; body !~ "bad"; }',
	'proxy_pass http://u; health_check interval=1s jitter=1s fails=2 passes=2 '
	. 'uri=/h port=81 match=m mandatory persistent;');
is($rc, 0, 'every parameter and condition') or diag($err);

emerg('', 'proxy_pass http://u; health_check;', 6,
	'upstream "u" must reside in shared memory', 'no zone', 1);
emerg('', 'proxy_pass http://127.0.0.1:1; health_check;', 6,
	'"health_check" requires an upstream group.*', 'proxy_pass to an address');
emerg('', 'proxy_pass http://u; health_check match=x;', 6, 'match "x" not found', 'unknown match');
emerg('', 'proxy_pass http://u; health_check interval=0;', 6,
	'invalid parameter "interval=0"', 'bad interval');
emerg('', 'proxy_pass http://u; health_check persistent;', 6,
	'"persistent" requires "mandatory" in "health_check"', 'persistent alone');

# type=grpc and keepalive_time=.
($rc, $err) = check('', 'grpc_pass grpc://u; health_check interval=1s keepalive_time=10s '
	. 'type=grpc grpc_service=a.B grpc_status=12;');
is($rc, 0, 'type=grpc with grpc_service= and grpc_status=, keepalive_time=') or diag($err);
emerg('', 'grpc_pass grpc://u; health_check uri=/h type=grpc;', 6,
	'"health_check" type=grpc cannot be used with "uri" or "match"', 'type=grpc with uri=');
emerg('', 'grpc_pass grpc://u; health_check grpc_service=x type=grpc;', 6,
	'invalid parameter "grpc_service=x"', 'grpc_service= before type=grpc');
emerg('', 'grpc_pass grpc://u; health_check type=grpc grpc_status=ok;', 6,
	'invalid parameter "grpc_status=ok"', 'bad grpc_status=');
emerg('', 'proxy_pass http://u; health_check type=grpc;', 6,
	'"health_check" type=grpc requires "grpc_pass" or "proxy_http_version 2"',
	'type=grpc in an HTTP/1 location');
emerg('', 'proxy_pass http://u; health_check keepalive_time=x;', 6,
	'invalid parameter "keepalive_time=x"', 'bad keepalive_time=');
emerg('', 'proxy_pass http://u; health_check udp;', 6,
	'invalid parameter "udp"', 'udp in http');
emerg('match m { status 99; }', '', 3, 'invalid parameter "99"', 'bad status');
emerg('match m { header X ? y; }', '', 3, 'invalid parameter "\?"', 'bad header operator');
emerg('match m { expect x; }', '', 3, 'unknown directive "expect"', 'expect in http');

# Stream: match with send/expect, health_check_timeout; errors.
$t->write_file('s.conf', "events { }\nstream {\nhealth_check_timeout 2s;\n"
	. "match p { send \"PING\\r\\n\"; expect ~ \"PONG\"; }\n"
	. "upstream u { zone z 64k; server 127.0.0.1:1; }\n"
	. "server { listen 127.0.0.1:1; proxy_pass u; health_check interval=1s match=p udp; health_check_timeout 1s; }\n}\n");
(undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', 's.conf', '-e', 'stderr', '-t');
like($err, qr/test is successful/, 'stream health_check, match, health_check_timeout');

$t->write_file('s.conf', "events { }\nstream {\n"
	. "match p { status 200; }\n}\n");
(undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', 's.conf', '-e', 'stderr', '-t');
like($err, qr/\[emerg\] \d+#0: unknown directive "status" in \Q$d\E\/s\.conf:3\b/, 'status in stream match');

# slow_start= on a server line.
$t->write_file('u.conf', "events { }\nhttp {\nupstream u {\n"
	. "server 127.0.0.1:1 slow_start=soon;\n}\n}\n");
(undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', 'u.conf', '-e', 'stderr', '-t');
like($err, qr/\[emerg\] \d+#0: invalid parameter "slow_start=soon" in \Q$d\E\/u\.conf:4\b/,
	'slow_start: bad time');
