#!/usr/bin/perl

# Behaviours where sluice once differed from nginx, each checked against what
# nginx does (issue 20): $upstream_bytes_* count everything on the wire; the
# $upstream_*_time of attempts that failed.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy rewrite upstream_zone stream/)->plan(50);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    log_format s "[$upstream_addr]";
    access_log %%TESTDIR%%/stream.log s;
    upstream back {
        server 127.0.0.1:%%PORT_8085%% max_fails=1 fail_timeout=1s;
        server 127.0.0.1:%%PORT_8086%%;
    }
    server { listen 127.0.0.1:%%PORT_8075%%; proxy_pass back; }
}

http {
    log_format up '$uri s=$status rt=$upstream_response_time ht=$upstream_header_time '
                  'ct=$upstream_connect_time a=$upstream_addr us=$upstream_status '
                  'br=$upstream_bytes_received bs=$upstream_bytes_sent';
    access_log %%TESTDIR%%/up.log up;
    log_format body '$uri rb=$request_body';

    upstream two {
        server 127.0.0.1:%%PORT_8083%%;
        server 127.0.0.1:%%PORT_8082%%;
    }
    upstream hk {
        hash $arg_k;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
    }
    upstream hc {
        hash $arg_k consistent;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
    }
    upstream tried {
        server 127.0.0.1:%%PORT_8083%%;
        server 127.0.0.1:%%PORT_8082%% down;
    }
    upstream aged {
        server 127.0.0.1:%%PORT_8082%%;
        keepalive 4;
        keepalive_time 1s;
    }
    upstream down {
        server 127.0.0.1:%%PORT_8082%% down;
    }

    server {
        listen       127.0.0.1:%%PORT_8080%%;
        server_name  localhost;
        proxy_read_timeout 1s;

        location /raw/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/; add_header X-IP $remote_addr; }
        location /b/ { proxy_pass http://127.0.0.1:%%PORT_8082%%/; }
        location /two/ { proxy_pass http://two/; }
        location /down/ { proxy_pass http://down/; }

        location /ep { error_page 302 =200 /target; return 302 /x; }
        location = /target { return 200 "target $request_uri"; }
        location /rw-drop { rewrite ^/rw-drop(.*)$ /echo$1?n=1? last; }
        location /rw-add { rewrite ^/rw-add(.*)$ /echo$1?n=1 last; }
        location /rw-none { rewrite ^ /echo? last; }
        location /rw-abs { rewrite ^ http://example.com/y?z=1 redirect; }
        location /echo { return 200 "echo uri=$uri args=$args"; }
        location /setbody {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_set_body "got:$request_body";
            access_log %%TESTDIR%%/body.log body;
        }
        location /aged/ {
            proxy_pass http://aged/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
        location /hk { proxy_pass http://hk; }
        location /hc { proxy_pass http://hc; }
        location /tried { proxy_pass http://tried; }
        location /accel/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /internal { return 200 "internal foo=$upstream_http_x_foo"; }
        location /auth {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_intercept_errors on;
            error_page 401 /e401;
        }
        location = /e401 { return 200 "e401"; }
        location = /static { proxy_pass http://localhost:%%PORT_8082%%; }
        location /dyn4 {
            resolver 127.0.0.1:%%PORT_8053%% ipv6=off;
            proxy_pass http://$arg_h:%%PORT_8082%%;
        }
        location /dyn6 {
            resolver 127.0.0.1:%%PORT_8053%% ipv4=off;
            proxy_pass http://$arg_h:%%PORT_8082%%;
        }
        location /dyn {
            resolver 127.0.0.1:%%PORT_8053%%;
            proxy_pass http://$arg_h:%%PORT_8082%%;
        }
        location /dyn2 {
            resolver 127.0.0.1:%%PORT_8054%% 127.0.0.1:%%PORT_8053%%;
            resolver_timeout 8s;
            proxy_pass http://$arg_h:%%PORT_8082%%;
        }
        location /var { set $h localhost; proxy_pass http://$h:%%PORT_8082%%; }
        location /unix { set $s unix:%%TESTDIR%%/sock; proxy_pass http://$s; }
        location /pp/ { proxy_pass http://127.0.0.1:%%PORT_8082%%/; }
        location /x-dir { if (-x %%TESTDIR%%/dir) { return 200 "dir x"; } return 200 "not x"; }
        location /x-file { if (-x %%TESTDIR%%/f.txt) { return 200 "file x"; } return 200 "not x"; }
        location /lm/ {
            alias %%TESTDIR%%/;
            add_header Last-Modified "Wed, 21 Oct 2015 07:28:00 GMT";
        }
    }

    server {
        listen       unix:%%TESTDIR%%/sock;
        location / { return 200 "via unix $uri"; }
    }

    server {
        listen       127.0.0.1:%%PORT_8084%%;
        location /rw-local { rewrite ^ /echo redirect; }
    }
}

EOF

my $len = "HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 5\r\n\r\nhello";
my $chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
$t->raw_backend(port(8081), '/len' => $len, '/chunked' => $chunked,
	'/order' => "HTTP/1.1 200 OK\r\nX-B: 1\r\nX-A: 2\r\nX-C: 3\r\nX-A: 4\r\nContent-Length: 2\r\n\r\nok",
	'/order-dropped' => "HTTP/1.1 200 OK\r\nX-B: 1\r\nConnection: keep-alive\r\nX-A: 2\r\n"
		. "Date: x\r\nX-C: 3\r\nServer: s\r\nX-D: 4\r\nContent-Length: 2\r\n\r\nok",
	'/accel' => "HTTP/1.1 200 OK\r\nX-Accel-Redirect: /internal\r\nX-Foo: first\r\n"
		. "Content-Length: 0\r\n\r\n",
	'/auth' => "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\n"
		. "Content-Length: 0\r\n\r\n");
$t->backend(port(8082));
$t->backend(port(8086), close => 1);
my $long = join('.', ('a' x 60) x 3, 'test');
$t->write_file('dns.txt', join('', map { "$_\n" }
	'only4.test A 127.0.0.1 60', 'only4.test AAAA ::1 60',
	'only6.test A 127.0.0.1 60', 'only6.test AAAA ::1 60',
	"$long A 127.0.0.1 60",
	'tc.test TC', 'tc.test A 127.0.0.1 60',
	'second.test A 127.0.0.1 60',
	'c1.test CNAME c2.test 60', 'c2.test CNAME c3.test 60', 'c3.test A 127.0.0.1 60',
	'dangling.test CNAME nowhere.test 60'));
$t->dns(port(8053));
mkdir $t->testdir() . '/dir';
$t->write_file('f.txt', "hello\n");
$t->run();

# The access log line for $uri, once it is written.
sub logline {
	my ($uri) = @_;
	my $l;
	poll_until(sub { ($l) = $t->read_file('up.log') =~ /^\Q$uri\E (.*)$/m; defined $l }, 5);
	return $l // '';
}

###############################################################################

# $upstream_bytes_received and $upstream_bytes_sent: status line, headers and
# body, as they went on the wire (nginx counts what it read and wrote).
http(<<EOF, body => 'abc');
POST /raw/len HTTP/1.0
Host: localhost
Content-Length: 3

EOF
http_get('/raw/chunked');
{
	my @req = map { length } $t->raw_requests(port(8081));
	my ($l1, $l2) = (length $len, length $chunked);
	like(logline('/raw/len'), qr/ br=$l1 bs=$req[0]$/, 'upstream bytes: head and body both ways');
	like(logline('/raw/chunked'), qr/ br=$l2 bs=$req[1]$/, 'upstream bytes: chunk framing counted');
}

# Times of failed attempts, as nginx 1.19+ has them: a refused connect has a
# response time and no connect or header time; a header that timed out has a
# response and connect time, no header time; no live upstream: 0.
http_get('/two/x');
like(logline('/two/x'), qr/rt=\d+\.\d{3}, \d+\.\d{3} ht=-, \d+\.\d{3} ct=-, \d+\.\d{3} .* us=502, 200 /,
	'refused connect: response time, no connect or header time');
http_get('/b/slow/2');
like(logline('/b/slow/2'), qr/s=504 rt=1\.\d{3} ht=- ct=\d+\.\d{3} .* us=504 /,
	'header timeout: response time, connect time, no header time');
{
	# A client that goes away while the upstream works: 499, the attempt
	# with its connect and response times, no status or header time.
	my $s = http("GET /b/slow/2/abort HTTP/1.0\n\n", start => 1);
	sleep 0.5;
	close $s;
	like(logline('/b/slow/2/abort'),
		qr/^s=499 rt=0\.\d{3} ht=- ct=\d+\.\d{3} a=127.0.0.1:${\port(8082)} us=- br=0 bs=[1-9]/,
		'client gone: 499 with the attempt as nginx logs it');
}
http_get('/down/y');
like(logline('/down/y'), qr/s=502 rt=0\.000 ht=- ct=- a=down us=502 /, 'no live upstreams: 0');

# CONNECT (a target nginx's request line parser refuses): 400 and the
# connection closes, as nginx has it.
{
	my $r = http("CONNECT example.com:443 HTTP/1.1\nHost: localhost\n\n"
		. "GET /b/after HTTP/1.1\nHost: localhost\n\n");
	like($r, qr/^HTTP\/1.1 400 .*^Connection: close\r$/ms, 'CONNECT: 400, Connection: close');
	unlike($r, qr/after/, 'CONNECT: nothing more read on the connection');
}

# error_page for a code `return` gives: its page, the status replaced.
like(http_get('/ep'), qr/^HTTP\/1.1 200 .*target \/ep$/s, 'error_page: return 302 replaced');

# rewrite: the request's arguments follow the new ones unless the
# replacement ends with "?"; an absolute redirect gets them too.
like(http_get('/rw-drop/a?q=2'), qr/echo uri=\/echo\/a args=n=1$/, 'rewrite ...?: arguments dropped');
like(http_get('/rw-add/a?q=2'), qr/echo uri=\/echo\/a args=n=1&q=2$/, 'rewrite: arguments appended');
like(http_get('/rw-none?q=2'), qr/echo uri=\/echo args=$/, 'rewrite /x?: no arguments');
like(http_get('/rw-abs?q=2'), qr/^Location: http:\/\/example.com\/y\?z=1&q=2\r$/m,
	'rewrite to a URL: arguments appended');
like(http("GET /rw-local?q=2 HTTP/1.0\n\n", PeerAddr => '127.0.0.1:' . port(8084)),
	qr/^Location: http:\/\/127.0.0.1:${\port(8084)}\/echo\?q=2\r$/m,
	'redirect without Host or server_name: the local address');

# A proxy_pass location asked for without its final "/": nginx's 301.
like(http_get('/pp?a=1'), qr/^HTTP\/1.1 301 .*^Location: http:\/\/localhost:${\port(8080)}\/pp\/\?a=1\r$/ms,
	'missing slash: 301');

# if -x: the owner's execute bit, a directory's too.
like(http_get('/x-dir'), qr/dir x$/, '-x: a directory');
like(http_get('/x-file'), qr/not x$/, '-x: a file without the bit');

# add_header Last-Modified replaces the file's, and If-Range compares with it.
{
	my $r = http(<<EOF);
GET /lm/f.txt HTTP/1.1
Host: localhost
Range: bytes=0-1
If-Range: Wed, 21 Oct 2015 07:28:00 GMT
Connection: close

EOF
	like($r, qr/^HTTP\/1.1 206 .*\r\n\r\nhe$/s, 'add_header Last-Modified: If-Range matches it');
	is(() = $r =~ /^Last-Modified:/mg, 1, 'add_header Last-Modified: one Last-Modified');
	$r = http(<<EOF);
GET /lm/f.txt HTTP/1.1
Host: localhost
Range: bytes=0-1
If-Range: Wed, 21 Oct 2015 07:28:01 GMT
Connection: close

EOF
	like($r, qr/^HTTP\/1.1 200 /, 'add_header Last-Modified: other If-Range: whole');
}

# $request_body: in proxy_set_body and in the access log.
{
	my $before = () = $t->raw_requests(port(8081));
	like(http("POST /setbody HTTP/1.0\nContent-Length: 5\n\n", body => 'hello'),
		qr/ok \/setbody$/, 'request_body: proxied');
	my @req = $t->raw_requests(port(8081));
	like($req[$before] // '', qr/\r\n\r\ngot:hello$/, 'request_body: in proxy_set_body');
	my $l;
	poll_until(sub { ($l) = $t->read_file('body.log') =~ /^\/setbody (.*)$/m; defined $l }, 5);
	is($l, 'rb=hello', 'request_body: in the access log');
}

# hash with a key that is empty: round robin, consistent or not.
for my $u (qw/hk hc/) {
	my %seen;
	for (1 .. 4) {
		my $r = http_get("/$u?k=");
		$seen{$r =~ /^X-Port: \d+/m ? 'backend' : $r =~ /ok \/$u/ ? 'raw' : 'error'}++;
	}
	is(join(',', map { "$_=$seen{$_}" } sort keys %seen), 'backend=2,raw=2',
		"hash$u: an empty key spreads as round robin");
}

# Every peer tried, the rest down: the 502 of the last try, no further
# "no live upstreams" attempt (nginx's tries leave the down ones out).
http_get('/tried');
like(logline('/tried'), qr/ a=127.0.0.1:${\port(8083)} us=502 /, 'down peers are not tries');

# After X-Accel-Redirect the request sees the first response's headers; an
# intercepted 401 keeps its WWW-Authenticate.
like(http_get('/accel/accel'), qr/internal foo=first$/, 'X-Accel-Redirect: $upstream_http_*');
like(http_get('/auth'), qr/^HTTP\/1.1 401 .*^WWW-Authenticate: Basic realm="x"\r\n.*e401$/ms,
	'intercepted 401: WWW-Authenticate kept');

# proxy_pass with variables: a name a static proxy_pass made an upstream of
# needs no resolver; a unix: socket works.
like(http_get('/var'), qr/^HTTP\/1.1 200 .*${\port(8082)} \/var$/s, 'variable: implicit upstream');
like(http_get('/unix/x'), qr/via unix \/unix\/x$/, 'variable: unix socket');

# proxy_pass with variables, names through the location's resolver: its
# ipv4=off and ipv6=off, long names, TCP after a truncated reply, the next
# server after one that does not answer, CNAME chains; a CNAME to a name with
# no address is "Host not found" (a 502), as nginx has it.
sub dns_log { $t->read_file('dns.log') }
like(http_get('/dyn4?h=only4.test'), qr/^HTTP\/1.1 200 /, 'ipv6=off: resolved');
ok(dns_log() =~ /^only4\.test A udp$/m && dns_log() !~ /^only4\.test AAAA/m, 'ipv6=off: no AAAA query');
http_get('/dyn?h=only4.test');
like(dns_log(), qr/^only4\.test AAAA udp$/m, 'a resolver with both families asks again');
my $six = http_get('/dyn6?h=only6.test');
ok(dns_log() =~ /^only6\.test AAAA udp$/m && dns_log() !~ /^only6\.test A udp/m, 'ipv4=off: no A query');
like(http_get("/dyn?h=$long"), qr/^HTTP\/1.1 200 /, 'a long name');
like(http_get('/dyn?h=tc.test'), qr/^HTTP\/1.1 200 /, 'truncated: resolved');
like(dns_log(), qr/^tc\.test A tcp$/m, 'truncated: asked again over TCP');
like(http_get('/dyn2?h=second.test', timeout => 12), qr/^HTTP\/1.1 200 /,
	'the second server when the first does not answer');
like(http_get('/dyn?h=c1.test'), qr/^HTTP\/1.1 200 /, 'CNAME chain');
like(http_get('/dyn?h=dangling.test'), qr/^HTTP\/1.1 502 /, 'CNAME to no address: 502');
ok($t->waitforlog(qr/dangling\.test could not be resolved \(3: Host not found\)/, 2),
	'CNAME to no address: Host not found');

# keepalive_time is checked when a connection goes back to the cache: one
# that crossed it while idle serves once more, then closes.
{
	my $conns = sub { my ($n) = http_get('/aged/conns') =~ /\r\n\r\n(\d+)$/; $n // 0 };
	my $first = $conns->();
	sleep 1.5;
	my $second = $conns->();
	my $third = $conns->();
	is(($second - $first) . ' ' . ($third - $first), '0 1',
		'keepalive_time: checked when the connection goes back');
}

# stream: $upstream_addr names the peers a session tried, no more; a failed
# peer comes back after fail_timeout.
{
	my $via = sub { my ($p) = http_get('/x', PeerAddr => '127.0.0.1:' . port(8075)) =~ /^X-Port: (\d+)/mi; $p // 'none' };
	my @got = map { $via->() } 1 .. 3;
	my @log;
	poll_until(sub { @log = $t->read_file('stream.log') =~ /^(\[.*\])$/mg; @log >= 3 }, 5);
	my ($a, $b) = map { "127.0.0.1:" . port($_) } 8085, 8086;
	is(join(' ', @log[0 .. 2]), "[$a, $b] [$b] [$b]", 'stream: $upstream_addr lists the peers tried');
	$t->backend(port(8085), close => 1);
	sleep 1.2;
	my %seen;
	$seen{$via->()}++ for 1 .. 4;
	ok($seen{port(8085)}, 'stream: the peer serves again after fail_timeout');
}

# Proxied: the upstream's headers in their order, add_header's name as
# written.
{
	my $r = http_get('/raw/order');
	my @h = $r =~ /^(X-\w+): /mg;
	is("@h", 'X-B X-A X-C X-A X-IP', 'upstream header order kept, add_header name case kept');
}

# The upstream's order stays when headers between are not passed on
# (hop-by-hop, hidden by default).
{
	my $r = http_get('/raw/order-dropped');
	my @h = $r =~ /^(X-\w+): /mg;
	is("@h", 'X-B X-A X-C X-D X-IP', 'upstream header order kept around headers not passed');
}

# Host as nginx validates it: a port is not checked, an IPv6 literal's
# contents are not either (nor its closing bracket); empty is refused.
for my $h ('localhost:abc', '[zz::1]', '[::1') {
	like(http("GET /echo HTTP/1.1\nHost: $h\nConnection: close\n\n"), qr/^HTTP\/1.1 200 /,
		"Host $h: served");
}
like(http("GET /echo HTTP/1.1\nHost:\nConnection: close\n\n"), qr/^HTTP\/1.1 400 /, 'empty Host: 400');

###############################################################################
