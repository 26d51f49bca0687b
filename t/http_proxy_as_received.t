#!/usr/bin/perl

# A proxied response's headers go on as the upstream sent them (lines in its
# order and case, no map) where the location changes none of them; where
# something reads or changes them (here an access log that reads
# $sent_http_*, which puts them in a map) the client must get the same bytes.
# Each response is fetched through a location of each kind and the two are
# compared whole, Date aside; then what nginx's rules say of the lines:
# hop-by-hop and hidden ones gone, the upstream's order and spelling kept,
# sluice's Server unless proxy_pass_header, add_header after the upstream's
# lines, proxy_redirect and proxy_cookie_path still rewriting, $bytes_sent
# counting the lines, and a HEAD and a chunked answer framed as before.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(33);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format plain '$request_uri $status $bytes_sent';
    log_format sent '$request_uri $status $bytes_sent [$sent_http_x_a]';
    access_log %%TESTDIR%%/plain.log plain;

    upstream u { server 127.0.0.1:%%PORT_8081%%; keepalive 4; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        # As received.
        location /r/ { proxy_pass http://u/; }
        # The same, the headers put in a map.
        location /m/ { proxy_pass http://u/; access_log %%TESTDIR%%/sent.log sent; }

        location /rs/ {
            proxy_pass http://u/;
            proxy_pass_header Server;
            proxy_hide_header X-Hide;
        }
        location /ms/ {
            proxy_pass http://u/;
            proxy_pass_header Server;
            proxy_hide_header X-Hide;
            access_log %%TESTDIR%%/sent.log sent;
        }

        location /ra/ { proxy_pass http://u/; add_header X-Added "yes"; }
        location /ma/ {
            proxy_pass http://u/;
            add_header X-Added "yes";
            access_log %%TESTDIR%%/sent.log sent;
        }

        location /rc/ { proxy_pass http://u/; proxy_cookie_path /up/ /down/; }
        location /rn/ { proxy_pass http://u/; proxy_buffering off; }
        location /mn/ {
            proxy_pass http://u/;
            proxy_buffering off;
            access_log %%TESTDIR%%/sent.log sent;
        }
    }
}

EOF

my $mixed = "HTTP/1.1 200 Fine Thanks\r\n"
	. "x-a: 1\r\n"
	. "Content-TYPE: text/plain\r\n"
	. "Server: upstream/1\r\n"
	. "Date: Mon, 01 Jan 2024 00:00:00 GMT\r\n"
	. "X-Pad: pad\r\n"
	. "X-Accel-Charset: koi8-r\r\n"
	. "X-Hide: hidden\r\n"
	. "Set-Cookie: a=1; Path=/up/x\r\n"
	. "x-b: 2\r\n"
	. "SET-COOKIE: b=2\r\n"
	. "X-A: 3\r\n"
	. "Connection: keep-alive\r\n"
	. "Keep-Alive: timeout=5\r\n"
	. "Proxy-Connection: x\r\n"
	. "Content-Length: 5\r\n"
	. "\r\n"
	. "hello";

# The same lines, each name always spelt one way: a map keeps one spelling
# for a name, where the lines as received keep each line's (below).
(my $same = $mixed) =~ s/SET-COOKIE/Set-Cookie/;
$same =~ s/X-A: 3/x-a: 3/;

$t->raw_backend(port(8081),
	'/mixed' => $mixed,
	'/same' => $same,
	'/chunked' => "HTTP/1.1 200 OK\r\nx-a: c\r\nTransfer-Encoding: chunked\r\n"
		. "X-Tail: t\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
	'/moved' => "HTTP/1.1 302 Found\r\nLocation: http://u/next?a=1\r\n"
		. "x-a: m\r\nContent-Length: 0\r\n\r\n",
	'/head' => "HTTP/1.1 200 OK\r\nx-a: h\r\nContent-Length: 42\r\n\r\n",
);
$t->run();

# A response with its Date line out (sluice's own, which moves with the clock).
sub undated {
	my ($r) = @_;
	$r =~ s/^Date: [^\r]*\r\n//m;
	return $r;
}

# The header lines of a response, in order.
sub lines {
	my ($r) = @_;
	my ($head) = split /\r\n\r\n/, $r, 2;
	my @l = split /\r\n/, $head;
	shift @l;
	return @l;
}

# The responses through the two kinds of location, the location's own
# prefix (in a rewritten Location) made the same.
sub same_bytes {
	my ($as_received, $mapped, $name) = @_;
	my $raw = http_get($as_received);
	my $map = http_get($mapped);
	like($raw, qr/^HTTP\/1\.1 /, "$name: answered");
	(my $prefix = $as_received) =~ s{^(/\w+/).*}{$1};
	(my $other = $mapped) =~ s{^(/\w+/).*}{$1};
	$raw =~ s/\Q$prefix\E/$other/g;
	is(undated($raw), undated($map), "$name: the same bytes as through a map");
}

same_bytes("/r/$_", "/m/$_", $_) for qw/same chunked moved/;
same_bytes('/rn/chunked', '/mn/chunked', 'chunked, proxy_buffering off');
same_bytes('/rs/same', '/ms/same', 'proxy_pass_header');
same_bytes('/ra/same', '/ma/same', 'add_header');

my $r = http_get('/r/mixed');
my @l = lines($r);
like($r, qr/^HTTP\/1\.1 200 Fine Thanks\r\n/, 'reason phrase as sent');
like($l[0], qr/^Server: sluice\b/, "sluice's Server first");
like($l[1], qr/^Date: /, "sluice's Date second");
is_deeply([@l[2 .. $#l]], [
	'x-a: 1',
	'Content-TYPE: text/plain',
	'X-Hide: hidden',
	'Set-Cookie: a=1; Path=/up/x',
	'x-b: 2',
	'SET-COOKIE: b=2',
	'X-A: 3',
	'Content-Length: 5',
	'Connection: close',
], "the upstream's lines in its order, each in its own case (as nginx), "
	. 'hop-by-hop and hidden ones out');
like($r, qr/\r\n\r\nhello$/, 'body');

@l = lines(http_get('/rs/mixed'));
is($l[0], 'Server: upstream/1', 'proxy_pass_header Server: the upstream\'s, first');
is(scalar(grep { /^Server:/ } @l), 1, 'one Server');
is(scalar(grep { /^X-Hide:/ } @l), 0, 'proxy_hide_header');

@l = lines(http_get('/ra/mixed'));
is($l[-2], 'X-Added: yes', 'add_header after the upstream\'s lines');

$r = http_get('/r/moved');
like($r, qr{\r\nLocation: http://localhost:\d+/r/next\?a=1\r\n},
	'proxy_redirect rewrites Location');

like(http_get('/rc/mixed'), qr{\r\nSet-Cookie: a=1; Path=/down/x\r\n}i,
	'proxy_cookie_path rewrites Set-Cookie');

$r = http_get('/rn/chunked');
unlike($r, qr/Transfer-Encoding/i, 'HTTP/1.0 client: no chunks');
like($r, qr/\r\nX-Tail: t\r\n/, 'lines after Transfer-Encoding kept');
like($r, qr/\r\n\r\nhello world$/, 'chunked body, whole');

# HTTP/1.1, keep-alive: the upstream's length for a HEAD, chunks to the
# client for a body of unknown length.
my $s = http_start("HEAD /r/head HTTP/1.1\nHost: localhost\n\n", start => 1);
my $head = '';
while ($head !~ /\r\n\r\n/) {
	$s->sysread(my $buf, 4096) or last;
	$head .= $buf;
}
like($head, qr/\r\nContent-Length: 42\r\n/, 'HEAD: the upstream\'s length');
like($head, qr/\r\nConnection: keep-alive\r\n/, 'HEAD: kept alive');
$s->syswrite("GET /rn/chunked HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
my $rest = http_end($s);
is($rest =~ s/^.*?\r\n\r\n//sr, "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
	'then chunks to an HTTP/1.1 client');
like($rest, qr/\r\nTransfer-Encoding: chunked\r\n/, 'chunked');

# $bytes_sent counts the lines as received as it counts a map's: at least
# the upstream's lines that went on and the body.
my $upstream_lines = 0;
$upstream_lines += length($_) + 2 for grep { !/^(Server|Date|Connection):/ } lines(http_get('/r/same'));
$t->stop();
# The first line of each URI: /rn/chunked was asked for again over
# HTTP/1.1 above, which adds the chunks' framing to what was sent.
my %plain;
for (split /\n/, $t->read_file('plain.log')) {
	my @f = split / /;
	$plain{$f[0]} //= $f[2];
}
my %sent = map { (split / /)[0] => (split / /)[2] } split /\n/, $t->read_file('sent.log');
cmp_ok($plain{'/r/same'}, '>=', $upstream_lines + length('hello'),
	'$bytes_sent counts the lines as received');
is($plain{'/r/same'}, $sent{'/m/same'}, '$bytes_sent as through a map');
is($plain{'/rn/chunked'}, $sent{'/mn/chunked'}, 'chunked: $bytes_sent as through a map');
