#!/usr/bin/perl

# The stream (TCP) proxy on the upstream layer: sessions to an upstream with
# round robin, the next peer tried only when connecting fails (and not with
# proxy_next_upstream off), proxy_timeout, return, proxy_half_close, a
# session finishing across a graceful stop, and a zone upstream that
# follows DNS. The backends speak HTTP; the proxy only copies bytes.

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream/)->plan(17);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    resolver 127.0.0.1:%%PORT_8053%% valid=30s;
    proxy_connect_timeout 2s;
    log_format basic "$remote_addr $status [$upstream_addr] [$upstream_connect_time] "
                     "$bytes_received $bytes_sent $upstream_bytes_sent $upstream_bytes_received "
                     "$session_time $upstream_session_time $upstream_first_byte_time";
    access_log %%TESTDIR%%/stream.log basic;

    upstream rr { server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8082%%; }
    upstream dead {
        server 127.0.0.1:%%PORT_8089%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%%;
    }
    upstream named { zone zs 64k; server app.test:%%PORT_8081%% resolve; }

    server { listen 127.0.0.1:%%PORT_8070%%; proxy_pass rr; }
    server { listen 127.0.0.1:%%PORT_8071%%; proxy_pass dead; }
    server { listen 127.0.0.1:%%PORT_8072%%; proxy_pass dead; proxy_next_upstream off; }
    server { listen 127.0.0.1:%%PORT_8073%%; proxy_pass 127.0.0.1:%%PORT_8081%%; proxy_timeout 1s; }
    server { listen 127.0.0.1:%%PORT_8074%%; return "hello $remote_addr $server_addr:$server_port\n"; }
    server {
        listen 127.0.0.1:%%PORT_8075%%;
        proxy_pass 127.0.0.1:%%PORT_8081%%;
        proxy_half_close on;
    }
    server { listen 127.0.0.1:%%PORT_8076%%; proxy_pass named; }
    server { listen 127.0.0.1:%%PORT_8077%%; proxy_pass 127.0.0.1:%%PORT_8090%%; proxy_timeout 1s; }
}

http {
    access_log off;
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /api { api; }
        location /dead { proxy_pass http://127.0.0.1:%%PORT_8089%%; }
    }
}

EOF

$t->write_file('dns.txt', "app.test A 127.0.0.1 30\n");
$t->dns(port(8053));
# The backends close after answering: a session ends with them.
$t->backend(port(8081), close => 1);
$t->backend(port(8082), close => 1);
$t->run();

# HTTP connections and stream sessions share one numbering in a worker: the
# first of each (both failing to connect) do not both log as *1.
{
	my $h = http_get('/dead');
	my $st = http_get('/', PeerAddr => '127.0.0.1:' . port(8072));
	my @n = $t->read_file('error.log') =~ /\*(\d+) connect\(\) failed/g;
	ok(@n == 2 && $n[0] != $n[1], 'one connection numbering for HTTP and stream') or diag("@n");
}

sub via {
	my ($port, $uri) = @_;
	return http_get($uri // '/', PeerAddr => '127.0.0.1:' . port($port));
}

sub port_of { my ($p) = $_[0] =~ /^X-Port: (\d+)/mi; $p // 'none' }

like(via(8070), qr/^HTTP\/1.1 200/, 'a session proxied');
my %c;
$c{port_of(via(8070))}++ for 1 .. 10;
is(join(',', map { $c{port($_)} // 0 } 8081, 8082), '5,5', 'round robin over sessions');

my $ok = 0;
$ok++ for grep { port_of(via(8071)) eq port(8081) } 1 .. 4;
is($ok, 4, 'a failed connect is retried on the next peer');
ok($t->waitforlog(qr/\[error\].*connect\(\) failed \(111: Connection refused\) while connecting to upstream, client: 127\.0\.0\.1, server: 127\.0\.0\.1:\d+, upstream: "127\.0\.0\.1:${\ port(8089)}"/),
	'logged as nginx');

my ($answered, $empty) = (0, 0);
for (1 .. 4) {
	my $r = via(8072);
	$r eq '' ? $empty++ : $answered++;
}
is("$answered/$empty", '2/2', 'proxy_next_upstream off: a failed connect ends the session');

# The access log line of each session, when it ends.
my $dead = port(8089);
my $p81 = port(8081);
# One item per attempt, as nginx's: the failed one sent and got nothing,
# had no first byte, and lasted until it failed.
ok($t->waitforlog(qr/^127\.0\.0\.1 200 \[127\.0\.0\.1:$dead, 127\.0\.0\.1:$p81\] \[-, \d+\.\d{3}\] (\d+) (\d+) 0, \1 0, \2 \d+\.\d{3} \d+\.\d{3}, \d+\.\d{3} -, \d+\.\d{3}$/m, 3, 'stream.log'),
	'access log: a retried session, nginx\'s variables');
like($t->read_file('stream.log'), qr/^127\.0\.0\.1 502 \[127\.0\.0\.1:$dead\] \[-\] 0 0 0 0 \d+\.\d{3} \d+\.\d{3} -$/m,
	'access log: a session that found no upstream: 502');

# proxy_timeout: nothing moves for 1 s, the session closes.
my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8073)) or die;
my $start = time();
ok(closed_within($s, 3) && time() - $start >= 0.9, 'proxy_timeout closes an idle session');

# proxy_timeout also ends a session whose upstream stops reading: once
# every buffer on the way is full the writes wait, nothing moves, and it
# closes.
{
	my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1:' . port(8090),
		Listen => 1, ReuseAddr => 1) or die "listen: $!";
	my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8077)) or die;
	$c->blocking(0);
	my $wsel = IO::Select->new($c);
	my $chunk = 'x' x 65536;
	my $until = time() + 10;
	# Until nothing more goes for 0.3 s.
	while (time() < $until) {
		next if defined $c->syswrite($chunk);
		last unless $!{EAGAIN} && $wsel->can_write(0.3);
	}
	my $stalled = time();
	ok(closed_within($c, 4) && time() - $stalled < 3,
		'proxy_timeout closes a session whose writes wait');
}

# $server_addr of a listener on a specific address is that address.
is(http('', PeerAddr => '127.0.0.1:' . port(8074)), "hello 127.0.0.1 127.0.0.1:${\ port(8074)}\n",
	'return, with the client\'s and the server\'s addresses');

# proxy_half_close: the client stops sending, the answer still comes.
$s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8075)) or die;
$s->syswrite("GET /half HTTP/1.0\r\nHost: x\r\n\r\n");
shutdown($s, 1);
my $r = '';
my $sel = IO::Select->new($s);
while ($sel->can_read(3)) { $s->sysread($r, 4096, length $r) or last; }
like($r, qr/^HTTP\/1.1 200.*\/half$/s, 'proxy_half_close: answered after the client half-closed');

is(port_of(via(8076)), port(8081), 'a zone upstream following DNS');

my $api = http_get('/api/9/stream/upstreams');
like($api, qr/"named":\{.*"peers":\[\{[^\]]*"connections":1[,}][^\]]*"server":"127\.0\.0\.1:${\ port(8081)}"/s,
	'API: /api/9/stream/upstreams, connections counted');
unlike($api, qr/"responses"/, 'no HTTP response counts for stream peers');

# A graceful stop lets a session in progress finish.
my $slow = http("GET /slow/1 HTTP/1.0\nHost: x\n\n", start => 1,
	PeerAddr => '127.0.0.1:' . port(8070));
sleep 0.2;
$t->signal('QUIT');
like(http_end($slow), qr/^HTTP\/1.1 200/, 'a session finishes across QUIT');
ok($t->wait_exit(5), 'then the master exits');
