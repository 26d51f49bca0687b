#!/usr/bin/perl

# What the stream proxy gained by going through the same attempt engine and
# connection slots as HTTP: its sessions count in worker_connections
# together with HTTP connections (a session past the limit waits for a free
# slot, warned once as for HTTP), and a failed unix connect is logged with
# the same words as HTTP's, a client that leaves while its upstream
# connects releases the peer at once, and a session whose connect failed after the
# upstream's peer list changed is not retried on the new list (nginx's rule,
# which HTTP had and stream lacked).

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream/)->plan(16);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 1;

events {
    worker_connections 4;
}

stream {
    resolver 127.0.0.1:%%PORT_8053%% valid=1s;
    upstream moving { zone zm 64k; server mv.test:%%PORT_8082%% resolve; }

    server { listen 127.0.0.1:%%PORT_8070%%; proxy_pass 127.0.0.1:%%PORT_8081%%; }
    server {
        listen 127.0.0.1:%%PORT_8072%%;
        proxy_pass moving;
        proxy_connect_timeout 3s;
    }

    upstream hole { server 127.0.0.3:%%PORT_8082%% max_conns=1; }
    server {
        listen 127.0.0.1:%%PORT_8073%%;
        proxy_pass hole;
        proxy_connect_timeout 20s;
    }
    server { listen 127.0.0.1:%%PORT_8071%%; proxy_pass unix:%%TESTDIR%%/nowhere.sock; }
}

http {
    access_log off;
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location /unix { proxy_pass http://unix:%%TESTDIR%%/nowhere.sock:/; }
    }
}

EOF

$t->write_file('dns.txt', "mv.test A 127.0.0.2 1\nmv.test A 127.0.0.3 1\n");
$t->dns(port(8053));
$t->backend(port(8081));
$t->backend(port(8082), addr => '127.0.0.2');
$t->blackhole(port(8082), addr => '127.0.0.3');
$t->run();

# A request through a stream session on $s; its answer (HTTP backend).
sub through {
	my ($s, $uri) = @_;
	$s->syswrite("GET $uri HTTP/1.1\r\nHost: localhost\r\n\r\n");
	my $buf = '';
	my $sel = IO::Select->new($s);
	while ($sel->can_read(2)) {
		$s->sysread($buf, 4096, length $buf) or last;
		last if $buf =~ /\r\n\r\n.*\Q$uri\E/s;
	}
	return $buf;
}

sub open_to {
	my ($port) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 5);
	die "connect $port: $!\n" unless $s;
	return $s;
}

# Two HTTP connections and two stream sessions fill worker_connections 4
# (listening sockets hold none).
my @http = map { open_to(port(8080)) } 1 .. 2;
like(keepalive_get($_, '/h'), qr/ 200 /, 'an HTTP connection holds a slot') for @http;
my @sessions = map { open_to(port(8070)) } 1 .. 2;
like(through($sessions[0], '/s0'), qr/ 200 /, 'a stream session holds a slot');
like(through($sessions[1], '/s1'), qr/ 200 /, 'a second stream session holds a slot');

# A fifth client, a stream session, waits for a slot.
my $fifth = open_to(port(8070));
is(through($fifth, '/fifth'), '', 'a session past worker_connections waits');
ok($t->waitforlog(qr/\[warn\] .*4 worker_connections are not enough, waiting for a free one/),
	'the wait is warned about');

# An HTTP connection closes: the waiting session gets its slot.
close $http[0];
my $buf = '';
my $sel = IO::Select->new($fifth);
while ($sel->can_read(3)) {
	$fifth->sysread($buf, 4096, length $buf) or last;
	last if $buf =~ /\/fifth/;
}
like($buf, qr/ 200 .*\/fifth/s, 'the waiting session is served once an HTTP connection closed');
close $_ for @sessions, $fifth, $http[1];

# A failed unix connect reads the same from both proxies.
my $s = open_to(port(8071));
$s->sysread(my $nothing, 1);
close $s;
like(http_get('/unix'), qr/ 502 /, 'http: unix peer missing: 502');
my $log = qr/connect\(\) to unix:\S+nowhere\.sock failed \(2: No such file or directory\) while connecting to upstream/;
ok($t->waitforlog(sub { my @m = $_[0] =~ /$log/g; @m >= 2 }),
	'stream and http log a failed unix connect with the same words');

# Two sessions: round robin sends one to 127.0.0.2 (served) and one to
# 127.0.0.3, whose SYNs are dropped. While that one connects, the name
# loses 127.0.0.3; when its connect times out the peer list has moved, so
# it is not tried again on the new list: closed, "no live upstreams".
my @two = map { open_to(port(8072)) } 1 .. 2;
$t->write_file('dns.txt', "mv.test A 127.0.0.2 1\n");
my @got = map { through($two[$_], "/mv$_") } 0 .. 1;
my @ok = grep { / 200 / } @got;
is(scalar @ok, 1, 'one session served at once');
my ($waiting) = grep { $got[$_] eq '' } 0 .. 1;
ok(defined $waiting, 'the other waits on the dropped SYNs');
my $sel2 = IO::Select->new($two[$waiting // 0]);
my $rest = '';
if ($sel2->can_read(6)) {
	$two[$waiting // 0]->sysread($rest, 4096);
}
is($rest, '', 'after the connect timed out and the list moved: closed, not retried');
ok($t->waitforlog(qr/no live upstreams while connecting to upstream, client: 127.0.0.1, server: 127.0.0.1:\d+, upstream: "moving"/),
	'logged as no live upstreams');
close $_ for @two;

# A client leaves while its upstream connects (SYNs dropped, 20 s connect
# timeout): the attempt ends and the peer (max_conns=1) is free again at
# once, so the next session gets to connect instead of "no live upstreams".
{
	my $first = open_to(port(8073));
	select(undef, undef, undef, 0.3);
	close $first;
	ok($t->waitforlog(qr/client closed connection while connecting to upstream, client: 127.0.0.1, server: 127.0.0.1:\d+, upstream: "hole"/),
		'the client leaving mid-connect is logged');
	my $before = () = $t->read_file('error.log') =~ /no live upstreams.*upstream: "hole"/g;
	my $second = open_to(port(8073));
	ok(!closed_within($second, 1), 'the next session connects (the peer was released)');
	my $after = () = $t->read_file('error.log') =~ /no live upstreams.*upstream: "hole"/g;
	is($after, $before, 'no "no live upstreams" for it');
	close $second;
}
