#!/usr/bin/perl

# The mirror module: each request also goes, as a background subrequest, to
# every mirror URI (an internal location proxying to a shadow backend) with
# its method, $request_uri, headers and body (none with
# mirror_request_body off); several mirrors; mirror off inherited and
# turned off; a dead shadow does not change the answer; a shadow that holds
# its request does not hold the client's response nor its keep-alive
# connection; only the client's request is logged.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy mirror/)->plan(19)
	->expect_errors(qr/connect\(\) failed/);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format m '$request $status';
    access_log %%TESTDIR%%/access.log m;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        mirror /mirror;

        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location /two/ {
            mirror /mirror;
            mirror /mirror2;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
        location /nobody/ {
            mirror_request_body off;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
        location /off/ { mirror off; proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location /dead/ { mirror /dead; proxy_pass http://127.0.0.1:%%PORT_8081%%; }

        location = /mirror {
            internal;
            proxy_pass http://127.0.0.1:%%PORT_8082%%$request_uri;
        }
        location = /mirror2 {
            internal;
            proxy_set_header X-Mirror two;
            proxy_pass http://127.0.0.1:%%PORT_8082%%$request_uri;
        }
        location = /dead {
            internal;
            proxy_pass http://127.0.0.1:%%PORT_8083%%$request_uri;
        }
    }
}

EOF

# Backends: one line a request in NAME.log ("METHOD URI BODY X-Mirror");
# the shadow holds a request for /hold/ (the file "holding" says so) until
# the test creates "release".
my ($main_port, $shadow_port) = (port(8081), port(8082));
port(8083);
Test::Sluice::_release_ports();
for my $b (['main', $main_port], ['shadow', $shadow_port]) {
	my ($name, $p) = @$b;
	$t->run_daemon(sub {
		$SIG{CHLD} = 'IGNORE';
		my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$p",
			Listen => 32, ReuseAddr => 1) or die "$name: $!\n";
		open my $fh, '>', "$d/$name.ready"; close $fh;
		while (my $c = $l->accept()) {
			my $pid = fork();
			next if !defined $pid || $pid;
			serve($c, $name);
			POSIX::_exit(0);
		}
	});
	$t->waitforfile("$d/$name.ready");
}

sub serve {
	my ($c, $name) = @_;
	while (1) {
		my $req = '';
		while ($req !~ /\r\n\r\n/) {
			sysread($c, $req, 4096, length $req) or return;
		}
		my ($head, $body) = split /\r\n\r\n/, $req, 2;
		my ($len) = $head =~ /^Content-Length: (\d+)/mi;
		while (length $body < ($len // 0)) {
			sysread($c, $body, 4096, length $body) or return;
		}
		my ($m, $uri) = $head =~ m{^(\S+) (\S+)};
		my ($x) = $head =~ /^X-Mirror: (\S+)/mi;
		open my $fh, '>>', "$d/$name.log";
		syswrite($fh, "$m $uri $body " . ($x // '-') . "\n");
		close $fh;
		if ($name eq 'shadow' && $uri =~ m{^/hold/}) {
			open my $h, '>', "$d/holding"; close $h;
			for (1 .. 100) {
				last if -e "$d/release";
				select(undef, undef, undef, 0.1);
			}
		}
		my $out = "$name $m $uri $body";
		syswrite($c, "HTTP/1.1 200 OK\r\nContent-Length: " . length($out)
			. "\r\n\r\n$out");
	}
}

$t->run();

###############################################################################

sub lines { my $f = "$d/$_[0].log"; -e $f ? do { open my $fh, '<', $f; <$fh> } : () }
sub seen { my ($name, $re) = @_; poll_until(sub { grep { /$re/ } lines($name) }, 5) }
sub post {
	my ($uri, $body) = @_;
	return http("POST $uri HTTP/1.1\nHost: localhost\nConnection: close\n"
		. "Content-Length: " . length($body) . "\n\n$body");
}

like(post('/a?x=1', 'hello'), qr/\r\n\r\nmain POST \/a\?x=1 hello$/, 'POST: the main answer');
ok(seen('shadow', qr{^POST /a\?x=1 hello -$}), 'mirror: method, URI, arguments and body');
ok(seen('main', qr{^POST /a\?x=1 hello -$}), 'the body still reaches the main backend');

like(post('/two/b', 'body2'), qr/main POST \/two\/b body2$/, 'two mirrors: the main answer');
ok(seen('shadow', qr{^POST /two/b body2 two$}), 'the second mirror');
ok(seen('shadow', qr{^POST /two/b body2 -$}), 'the first mirror');

like(post('/nobody/c', 'secret'), qr/main POST \/nobody\/c secret$/, 'mirror_request_body off: main');
ok(seen('shadow', qr{^POST /nobody/c  -$}), 'mirror_request_body off: no body to the mirror');

like(http_get('/off/d'), qr/main GET \/off\/d $/, 'mirror off: main');
http_get('/after-off');
ok(seen('shadow', qr{^GET /after-off }), 'a later request mirrored');
ok(!grep({ m{/off/d} } lines('shadow')), 'mirror off: not mirrored');

like(http_get('/dead/e'), qr/main GET \/dead\/e $/, 'dead shadow: the answer');
ok($t->waitforlog(qr/connect\(\) failed .*127\.0\.0\.1:\d+\/dead\/e/), 'dead shadow: logged');

# A shadow that holds its request (up to 10 s, until "release"): the
# client gets its answer (keepalive_get gives up after 3 s without data),
# and a second one on the same connection, while the shadow still holds it.
my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080)) or die "connect: $!";
my $r1 = keepalive_get($s, '/hold/f');
like($r1, qr/main GET \/hold\/f $/, 'held shadow: the answer');
# The mirror may reach the shadow after the answer: wait for it, then the
# second request is answered while the shadow surely holds the first.
ok(poll_until(sub { -e "$d/holding" }, 5) && !-e "$d/release",
	'held shadow: the shadow holds the mirror, unanswered');
my $r2 = keepalive_get($s, '/g');
like($r2, qr/main GET \/g $/, 'held shadow: keep-alive goes on');
ok(!-e "$d/release", 'held shadow: still holding then');
$t->write_file('release', '');
close $s;
ok(seen('shadow', qr{^GET /g }), 'the next request mirrored too');

# Only the client's requests are logged (log_subrequest off).
poll_until(sub { grep { m{^GET /g } } lines_log() }, 5);
sub lines_log { my $f = "$d/access.log"; -e $f ? do { open my $fh, '<', $f; <$fh> } : () }
my @log = lines_log();
ok(!grep({ m{mirror|/dead } } @log) && (grep { m{^POST /two/b HTTP/1.1 200$} } @log) == 1,
	'access log: the client requests only') or diag(join '', @log);
