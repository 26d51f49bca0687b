#!/usr/bin/perl

# The API's writes (api write=on), with two workers: PATCH a server of a
# zone upstream down, draining (a request in flight finishes, new ones go
# elsewhere) and up again (also one configured `down`), seen by every worker
# at once; Plus's server objects (GET .../servers[/ID]); refused from an
# address that allow/deny keeps out; malformed JSON, unknown, unsupported,
# duplicate or mistyped parameters → 400 and nothing changed; unknown IDs
# and upstreams → 404, an upstream without a zone → 400; 405 without
# write=on; the changes in the state file, kept across a reload and a cold
# start; a stream upstream's server patched the same way.

use warnings;
use strict;

use Test::More;
use JSON::PP;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone stream/)->plan(54);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;

    upstream app {
        zone apps 64k;
        state %%TESTDIR%%/app.state;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        server 127.0.0.1:%%PORT_8083%% down;
    }
    upstream plain { server 127.0.0.1:%%PORT_8081%%; }

    server {
        listen 127.0.0.1:%%PORT_8080%% reuseport;
        location /app/ { proxy_pass http://app/; }
        location /api { api write=on; allow 127.0.0.1; deny all; }
        location /ro { api; }
    }
}

stream {
    upstream st { zone sts 64k; server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8082%%; }
    server { listen 127.0.0.1:%%PORT_8090%%; proxy_pass st; }
}

EOF

$t->backend(port(8081));
$t->backend(port(8082));
$t->backend(port(8083));
$t->run();
$t->started_workers(2);

my ($p1, $p2, $p3) = (port(8081), port(8082), port(8083));
my $json = JSON::PP->new->canonical;

sub request {
	my ($method, $uri, $body, %extra) = @_;
	$body //= '';
	my $len = length $body;
	my $r = http("$method $uri HTTP/1.0\nHost: localhost\nContent-Length: $len\n\n",
		body => $body, %extra) // '';
	my ($code) = $r =~ /^HTTP\/1.1 (\d+)/;
	my ($b) = $r =~ /\r\n\r\n(.*)\z/s;
	my $v = eval { decode_json($b // '') };
	return ($code // 0, $v, $r);
}

sub patch { request('PATCH', @_) }
sub get { request('GET', $_[0]) }

# The error's status and code, as Plus shapes it.
sub error_of {
	my ($code, $v) = @_;
	my $e = ref $v eq 'HASH' ? $v->{error} // {} : {};
	my $ok = ($e->{status} // 0) == $code && defined $v->{request_id}
		&& ($v->{href} // '') =~ /ngx_http_api_module/;
	return $code . ' ' . ($e->{code} // '') . ($ok ? '' : ' (bad shape)');
}

# Which backends answered $n requests, each on a new connection.
sub ports {
	my ($n) = @_;
	my %seen;
	for (1 .. $n) {
		my $r = http_get('/app/x') // '';
		my ($port) = $r =~ /^X-Port: (\d+)/mi;
		$seen{$r =~ /^HTTP\/1.1 502/ ? 'none' : $port // 'error'}++;
	}
	return join ' ', sort keys %seen;
}

# Peer $id's state as each worker shows it (by pid), over $n requests.
sub states {
	my ($id, $n) = @_;
	my (%pids, %states);
	for (1 .. $n) {
		my (undef, $info) = get('/api/9/nginx');
		my (undef, $up) = get('/api/9/http/upstreams/app');
		$pids{$info->{pid} // 0}++;
		$states{$up->{peers}[$id]{state} // 'none'}++;
	}
	return (scalar(keys %pids), join ' ', sort keys %states);
}

# Ports as ports() lists them.
sub set { join ' ', sort @_ }

sub servers { $json->encode((get('/api/9/http/upstreams/app/servers'))[1] // []) }

###############################################################################

my ($code, $v) = get('/api/9/http/upstreams/app/servers');
is($code, 200, 'servers: 200');
is(join(',', map { "$_->{id}=$_->{server}" . ($_->{down} ? ':down' : '') } @{$v // []}),
	"0=127.0.0.1:$p1,1=127.0.0.1:$p2,2=127.0.0.1:$p3:down", 'servers: ids, addresses, down');
ok($v->[0]{weight} == 1 && $v->[0]{max_fails} == 1 && $v->[0]{fail_timeout} eq '10s'
	&& $v->[0]{slow_start} eq '0s' && $v->[0]{route} eq '' && !$v->[0]{backup}
	&& !exists $v->[0]{drain}, 'server object: Plus fields');
($code, $v) = get('/api/9/http/upstreams/app/servers/2');
ok($code == 200 && $v->{id} == 2 && $v->{down}, 'one server');
is(ports(20), set($p1, $p2), 'traffic: both peers up');

# down: every worker follows at once.
($code, $v) = patch('/api/9/http/upstreams/app/servers/0', '{"down": true}');
ok($code == 200 && $v->{id} == 0 && $v->{down}, 'PATCH down: 200 and the server');
is(ports(30), $p2, 'down peer gets no requests');
my ($workers, $states) = states(0, 30);
is($workers, 2, 'both workers answered the API');
is($states, 'down', 'both workers show it down');

# drain: a request in flight to the drained peer finishes; new ones go
# elsewhere.
my $slow = http("GET /app/slow/2/x HTTP/1.0\nHost: localhost\n\n", start => 1);
select(undef, undef, undef, 0.3);
($code, $v) = patch('/api/9/http/upstreams/app/servers/0', '{"down": false}');
ok($code == 200 && !$v->{down}, 'PATCH down false: up again');
($code, $v) = patch('/api/9/http/upstreams/app/servers/1', '{"drain": true}');
ok($code == 200 && $v->{drain} && !$v->{down}, 'PATCH drain: 200, drain shown');
my $r = http_end($slow);
like($r, qr/^HTTP\/1.1 200.*^X-Port: $p2\r$/ms, 'request in flight on the drained peer finished');
is(ports(20), $p1, 'draining peer gets no new requests');
($workers, $states) = states(1, 20);
is($states, 'draining', 'state draining in every worker');

# down: false on a peer configured down brings it up.
($code, $v) = patch('/api/9/http/upstreams/app/servers/2', '{"down": false}');
ok($code == 200 && !$v->{down}, 'configured down peer: up by the API');
is(ports(30), set($p1, $p3), 'it takes requests, the draining one still none');

# Refused input changes nothing.
my $before = servers();
for my $case (
	['{"down": tru}', 'JsonError', 'malformed JSON'],
	['{"down": true', 'JsonError', 'cut JSON'],
	['', 'JsonError', 'empty body'],
	['[true]', 'JsonError', 'not an object'],
	['{"down": true} {}', 'JsonError', 'trailing data'],
	['{"down": "yes"}', 'UpstreamConfFormatError', 'wrong type'],
	['{"down": true, "down": false}', 'UpstreamConfFormatError', 'duplicate key'],
	['{"down": true, "colour": 1}', 'UpstreamConfFormatError', 'unknown parameter'],
	['{"weight": 5}', 'UpstreamConfFormatError', 'unsupported parameter'],
	['{"down": {"x": true}}', 'UpstreamConfFormatError', 'nested object'],
) {
	my ($body, $err, $name) = @$case;
	($code, $v) = patch('/api/9/http/upstreams/app/servers/0', $body);
	is(error_of($code, $v), "400 $err", "$name: 400");
}
($code, $v) = patch('/api/9/http/upstreams/app/servers/0', '{"down": true' . (' ' x 20000) . '}');
is(error_of($code, $v), '400 BodyReadError', 'huge body: 400');
is(servers(), $before, 'refused requests changed nothing');

($code, $v) = patch('/api/9/http/upstreams/app/servers/7', '{"down": true}');
is(error_of($code, $v), '404 UpstreamServerNotFound', 'unknown ID: 404');
($code, $v) = patch('/api/9/http/upstreams/app/servers/x', '{"down": true}');
is(error_of($code, $v), '404 UpstreamServerNotFound', 'ID not a number: 404');
($code, $v) = patch('/api/9/http/upstreams/nope/servers/0', '{"down": true}');
is(error_of($code, $v), '404 UpstreamNotFound', 'unknown upstream: 404');
($code, $v) = patch('/api/9/http/upstreams/plain/servers/0', '{"down": true}');
is(error_of($code, $v), '400 UpstreamStatic', 'upstream without a zone: 400');
($code, $v) = patch('/api/42/http/upstreams/app/servers/0', '{"down": true}');
is(error_of($code, $v), '404 UnknownVersion', 'unknown version: 404');
($code, $v) = request('POST', '/api/9/http/upstreams/app/servers', '{"server": "127.0.0.1:1"}');
is(error_of($code, $v), '405 MethodNotSupported', 'POST: not supported');
($code, $v) = patch('/ro/9/http/upstreams/app/servers/0', '{"down": true}');
is(error_of($code, $v), '405 MethodDisabled', 'without write=on: 405 method disabled');

# allow/deny: another loopback address is refused.
my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080),
	LocalAddr => '127.0.0.2', Proto => 'tcp');
($code) = $s ? patch('/api/9/http/upstreams/app/servers/0', '{"down": true}', socket => $s)
	: (0);
is($code, 403, 'PATCH from a denied address: 403');
is(servers(), $before, 'and nothing changed');

# The state file: the changes as nginx server lines (the master writes it).
my $file = $t->testdir() . '/app.state';
ok(poll_until(sub {
	my $text = -e $file ? $t->read_file($file) : '';
	$text =~ /^server 127\.0\.0\.1:$p2 drain;$/m && $text =~ /^server 127\.0\.0\.1:$p3;$/m;
}, 5), 'state file has the drain and the up');
unlike($t->read_file($file), qr/:$p1\b/, 'no line for an unchanged peer');

# A reload keeps the changes.
ok($t->reload(), 'reload');
ok(poll_until(sub {
	my (undef, $i) = get('/api/9/nginx');
	($i->{generation} // 0) >= 2;
}, 5), 'new generation answers');
is(servers(), $before, 'servers after reload: as before');
is(ports(20), set($p1, $p3), 'after reload: the draining peer still gets nothing');

# down again, then a cold start: the state file brings the changes back.
($code) = patch('/api/9/http/upstreams/app/servers/0', '{"down": true}');
is($code, 200, 'PATCH down after the reload');
ok(poll_until(sub { $t->read_file($file) =~ /^server 127\.0\.0\.1:$p1 down;$/m }, 5),
	'state file has it');
$before = servers();
$t->stop();
$t->run();
$t->started_workers(2);
is(servers(), $before, 'after a cold start: the same servers, from the state file');
is(ports(20), $p3, 'and traffic follows them');

# up again by drain: false, and back to the configuration's own state.
($code, $v) = patch('/api/9/http/upstreams/app/servers/1', '{"drain": false}');
ok($code == 200 && !$v->{drain} && !$v->{down}, 'drain false: up');
($code, $v) = patch('/api/9/http/upstreams/app/servers/2', '{"down": true}');
ok($code == 200 && $v->{down}, 'configured down peer: down again');
is(ports(20), $p2, 'traffic to the one peer up');

# A stream upstream: its sessions follow too.
# The backend keeps its connections open: read one response, then close.
sub stream_ports {
	my %seen;
	for (1 .. 12) {
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8090),
			Proto => 'tcp', Timeout => 5);
		my $r = $s ? keepalive_get($s, '/x') : '';
		close $s if $s;
		my ($port) = $r =~ /^X-Port: (\d+)/mi;
		$seen{$port // 'none'}++;
	}
	return join ' ', sort keys %seen;
}
is(stream_ports(), set($p1, $p2), 'stream: both peers take sessions');
($code, $v) = patch('/api/9/stream/upstreams/st/servers/0', '{"down": true}');
ok($code == 200 && $v->{down} && !exists $v->{route}, 'stream server: PATCH down');
($code, $v) = get('/api/9/stream/upstreams/st');
is($v->{peers}[0]{state}, 'down', 'stream peer shown down');
is(stream_ports(), $p2, 'stream: the down peer gets no sessions');
