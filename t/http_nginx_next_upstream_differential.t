#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) when upstreams fail: a
# backup peer, a dead primary, every peer dead, proxy_next_upstream with
# each http_* condition, off among other values, non_idempotent and POST,
# proxy_intercept_errors with error_page (=CODE, =, a named location), a
# backend that closes without answering. Each request goes to both; the
# status, the body (with $status and $upstream_status in error pages) and
# the access log line ($request_method, $status, $upstream_status,
# $upstream_addr, $upstream_response_length) must be the same. Left out,
# as sluice.conf(5) says: a body shorter than its length and an answer
# without a status line (502 from sluice).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside_each/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(2);
my $d = $t->testdir();

my @codes = (200, 204, 301, 400, 403, 404, 429, 500, 502, 503, 504);
my @pre = qw/a b c d e f g h i/;
my (%main, %backup);
for my $p (@pre) {
	for my $c (@codes) {
		my $body = $c == 204 ? '' : "main $c";
		$main{"/$p/s/$c"} = "HTTP/1.1 $c X\r\nContent-Length: " . length($body) . "\r\nX-From: main\r\n\r\n$body";
	}
	$main{"/$p/close"} = { send => "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", close => 1 };
	$main{"/$p/garbage"} = { send => "HTTP/1.1 2000 Bad\r\n\r\n", close => 1 };
	$main{"/$p/nothing"} = { send => '', close => 1 };
}
my $server = <<"EOF";
    log_format up '\$request_method \$uri \$status \$upstream_status [\$upstream_addr] \$upstream_response_length';
    upstream two { server 127.0.0.1:UP8082 max_fails=0; server 127.0.0.1:UP8083 backup max_fails=0; }
    upstream dead { server 127.0.0.1:UP8084 max_fails=0; server 127.0.0.1:UP8082 backup max_fails=0; }
    upstream alldead { server 127.0.0.1:UP8084 max_fails=0; server 127.0.0.1:UP8085 max_fails=0; }
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        access_log $d/up_WHO.log up;
        proxy_connect_timeout 1s;
        proxy_read_timeout 1s;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        location /a/ { proxy_pass http://two; proxy_next_upstream error timeout invalid_header http_500 http_502 http_503 http_504 http_403 http_404 http_429; }
        location /b/ { proxy_pass http://two; }
        location /c/ { proxy_pass http://dead; }
        location /d/ { proxy_pass http://alldead; }
        location /e/ { proxy_pass http://two; proxy_intercept_errors on; error_page 400 403 404 500 502 503 504 =200 /err; }
        location /f/ { proxy_pass http://two; proxy_next_upstream http_500 http_404 non_idempotent; }
        location /g/ { proxy_pass http://two; proxy_next_upstream http_500 http_503 off; }
        location /h/ { proxy_pass http://alldead; proxy_intercept_errors on; error_page 502 504 = \@fb; }
        location \@fb { return 200 "fallback \$upstream_status"; }
        location = /err { return 200 "err \$status \$upstream_status"; }
        location /i/ { proxy_pass http://two; proxy_intercept_errors on; error_page 404 /err; error_page 500 = /err; error_page 502 =503 /err; }
    }
EOF
$server =~ s/UP(\d+)/port($1)/ge;
(my $mine = $server) =~ s/WHO/sluice/;
(my $theirs = $server) =~ s/WHO/nginx/;
# sluice keeps idle upstream connections by default (keepalive 32, as
# nginx 1.31); nginx 1.22 is told to.
$theirs =~ s/max_fails=0; \}/max_fails=0; keepalive 32; }/g;
$t->raw_backend(port(8083));
nginx_beside_each($t, $mine, $theirs, %main);

my @req;
for my $p (@pre) {
	push @req, map { ["GET", "/$p/s/$_"] } @codes;
	push @req, ["GET", "/$p/nothing"];
	push @req, ["POST", "/$p/s/500"], ["POST", "/$p/s/502"];
}

my (@diffs, $same);
for my $r (@req) {
	my ($m, $path) = @$r;
	my @o = map {
		my $port = port($_);
		my $body = $m eq 'POST' ? "Content-Length: 3\r\n\r\nabc" : "\r\n";
		my $b = http("$m $path HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n$body", raw => 1,
			PeerAddr => "127.0.0.1:$port", timeout => 5) // '';
		my ($head, $b2) = split /\r\n\r\n/, $b, 2;
		$head //= '';
		my ($code) = $head =~ /^HTTP\/1\.1 (\d{3})/;
		my @f = map { my $n = $_; map { "$n=$_" } $head =~ /^\Q$n\E: ([^\r]*)/mgi } qw/X-From/;
		$b2 = '' unless ($code // 0) == 200;
		join(' | ', $code // 'none', @f, $b2 // '');
	} 8081, 8080;
	if ($o[0] eq $o[1]) { $same++; next }
	push @diffs, "$m $path:\n  nginx  [$o[0]]\n  sluice [$o[1]]";
}
is(scalar(@diffs), 0, scalar(@req) . " requests: the same answers (" . ($same // 0) . ')')
	or diag(join("\n", @diffs));

select(undef, undef, undef, 0.5);
my @n = split /\n/, ($t->read_file('up_nginx.log') // '');
my @s = split /\n/, ($t->read_file('up_sluice.log') // '');
my @ld;
for my $i (0 .. ($#n > $#s ? $#n : $#s)) {
	my ($a, $b) = ($n[$i] // '(none)', $s[$i] // '(none)');
	push @ld, "  nginx  $a\n  sluice $b" if $a ne $b;
}
is(scalar(@ld), 0, scalar(@n) . ' log lines the same') or diag(join("\n", @ld));
