#!/usr/bin/perl

# limit_rate, limit_rate_after and $limit_rate (read, and set) on the response to the
# client; X-Accel-Limit-Rate from the upstream; proxy_limit_rate on reading
# from the upstream, only with proxy_buffering. Timings are lower bounds with
# a wide margin (a limited 300 KB at 100 KB/s takes about 2 s: the first
# second's worth goes at once); an unlimited one is only said to take under
# 1.5 s, where it takes a few milliseconds.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(37);
my $d = $t->testdir();
my $size = 300 * 1024;

$t->write_file('big.bin', 'x' x $size);
$t->write_file('small.bin', 's' x 95);
$t->write_file_expand('sluice.conf', <<"EOF");

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /slow/ { alias $d/; limit_rate 100k; }
        location /head/ { alias $d/; limit_rate 100; }
        location /after/ { alias $d/; limit_rate 100k; limit_rate_after 250k; }
        location /var/ { alias $d/; set \$limit_rate 100k; }
        location /varoff/ { alias $d/; limit_rate 100k; set \$limit_rate 0; }
        location /byvar/ { alias $d/; set \$r 100k; limit_rate \$r; }
        location /if/ { alias $d/; if (\$arg_slow) { limit_rate 100k; } }
        location /ifafter/ { alias $d/; limit_rate 100k; if (\$arg_fast) { limit_rate_after 1m; } }
        location /show { limit_rate 123k; return 200 "rate=\$limit_rate"; }
        location /showset { limit_rate 123k; set \$limit_rate 5k; return 200 "rate=\$limit_rate"; }
        location /showself { limit_rate \$limit_rate; return 200 "rate=\$limit_rate"; }

        location /proxy/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
            proxy_limit_rate 100k;
        }
        location /proxyoff/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
            proxy_limit_rate 100k;
            proxy_buffering off;
        }
        location /proxyh2/ {
            proxy_pass http://127.0.0.1:%%PORT_8082%%/h2/;
            proxy_http_version 2;
            proxy_limit_rate 100k;
        }
        location /xaccel/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/accel/; }
        location /xignored/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/accel/;
            proxy_ignore_headers X-Accel-Limit-Rate;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8082%% http2;
        location /slow/ { alias $d/; limit_rate 100k; }
        location /h2/ { alias $d/; }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        location / { root $d; }
        location /accel/ { alias $d/; add_header X-Accel-Limit-Rate 102400; }
    }
}

EOF

$t->run();

# The time a whole response takes, and the response.
sub timed {
	my ($uri) = @_;
	my $start = time();
	my $r = http_get($uri, timeout => 20);
	my $s = time() - $start;
	note(sprintf("%s: %.2f s", $uri, $s));
	return ($s, $r);
}

sub whole {
	my ($r) = @_;
	my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
	return defined $body && length($body) == $size && $body =~ /\Ax+\z/;
}

my ($s, $r) = timed('/slow/big.bin');
ok(whole($r), 'limit_rate: the whole body');
cmp_ok($s, '>=', 1.5, 'limit_rate 100k: 300 KB take over 1.5 s');

($s, $r) = timed('/after/big.bin');
ok(whole($r), 'limit_rate_after: the whole body');
cmp_ok($s, '<', 1.5, 'limit_rate_after 250k: the rest fits the first second');

($s, $r) = timed('/var/big.bin');
ok(whole($r), 'set $limit_rate: the whole body');
cmp_ok($s, '>=', 1.5, 'set $limit_rate 100k limits');

($s, $r) = timed('/varoff/big.bin');
ok(whole($r), 'set $limit_rate 0: the whole body');
cmp_ok($s, '<', 1.5, 'set $limit_rate 0 lifts limit_rate');

($s, $r) = timed('/byvar/big.bin');
ok(whole($r), 'limit_rate with a variable: the whole body');
cmp_ok($s, '>=', 1.5, 'limit_rate $r limits');

($s, $r) = timed('/if/big.bin?slow=1');
ok(whole($r), 'limit_rate in if: the whole body');
cmp_ok($s, '>=', 1.5, 'limit_rate in if: limits when the condition holds');
($s, $r) = timed('/if/big.bin');
cmp_ok($s, '<', 1.5, 'limit_rate in if: not otherwise');

($s, $r) = timed('/ifafter/big.bin?fast=1');
ok(whole($r), 'limit_rate_after in if: the whole body');
cmp_ok($s, '<', 1.5, 'limit_rate_after in if: applies when the condition holds');
($s, $r) = timed('/ifafter/big.bin');
cmp_ok($s, '>=', 1.5, 'limit_rate_after in if: the location\'s limit otherwise');

like(http_get('/show'), qr/\r\n\r\nrate=125952$/, '$limit_rate reads limit_rate');
like(http_get('/showset'), qr/\r\n\r\nrate=5120$/, '$limit_rate after set, as a number');
like(http_get('/showself'), qr/\r\n\r\nrate=0$/, 'limit_rate $limit_rate reads 0');

($s, $r) = timed('/proxy/big.bin');
ok(whole($r), 'proxy_limit_rate: the whole body');
cmp_ok($s, '>=', 1.5, 'proxy_limit_rate 100k: reading 300 KB takes over 1.5 s');

($s, $r) = timed('/proxyoff/big.bin');
ok(whole($r), 'proxy_limit_rate without buffering: the whole body');
cmp_ok($s, '<', 1.5, 'proxy_limit_rate has no effect without proxy_buffering');

# nginx limits what the connection sent (c->sent), the head included: 95
# bytes of body fit the first second of limit_rate 100 alone, not after a
# head of 150 bytes or so (then the last bytes wait about 1.4 s).
($s, $r) = timed('/head/small.bin');
like($r, qr/\r\n\r\ns{95}\z/, 'limit_rate counting the head: the whole body');
cmp_ok($s, '>=', 0.5, 'limit_rate counts the response head too');

($s, $r) = timed('/proxyh2/big.bin');
ok(whole($r), 'proxy_limit_rate, HTTP/2 upstream: the whole body');
cmp_ok($s, '>=', 1.5, 'proxy_limit_rate 100k: an HTTP/2 upstream read that slowly too');

($s, $r) = timed('/xaccel/big.bin');
ok(whole($r), 'X-Accel-Limit-Rate: the whole body');
cmp_ok($s, '>=', 1.5, 'X-Accel-Limit-Rate 102400 limits');
unlike($r, qr/X-Accel-Limit-Rate/i, 'X-Accel-Limit-Rate not passed on');

($s, $r) = timed('/xignored/big.bin');
ok(whole($r), 'ignored X-Accel-Limit-Rate: the whole body');
cmp_ok($s, '<', 1.5, 'proxy_ignore_headers X-Accel-Limit-Rate');

SKIP: {
	skip 'no curl with HTTP/2', 2 unless `curl --version 2>/dev/null` =~ /HTTP2/;
	my $p = port(8082);
	my $start = time();
	my $out = `curl -s --max-time 20 --http2-prior-knowledge -o /dev/null -w '%{http_version} %{size_download}' http://127.0.0.1:$p/slow/big.bin 2>&1`;
	my $took = time() - $start;
	note(sprintf("HTTP/2: %.2f s", $took));
	is($out, "2 $size", 'HTTP/2: the whole body');
	cmp_ok($took, '>=', 1.5, 'HTTP/2: limit_rate 100k limits too');
}

$t->stop();

# Values that are not sizes: -t fails at the line.
for my $c (['limit_rate 10x;', 'limit_rate'], ['limit_rate_after -1;', 'limit_rate_after'],
	['proxy_limit_rate fast;', 'proxy_limit_rate'])
{
	my ($line, $name) = @$c;
	$t->write_file('bad.conf', "events {}\nhttp {\nserver {\n$line\n}\n}\n");
	my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'bad.log', '-t');
	like($err, qr/^sluice: \[emerg\] "$name" directive invalid value in \Q$d\E\/bad\.conf:4$/m,
		"$name: a value that is not a size refused at its line");
}
