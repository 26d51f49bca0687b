#!/usr/bin/perl

# HTTPS listeners: the handshake and a request, SNI choosing the server and
# its certificate, RSA or ECDSA by what the client offers, ssl_protocols and
# ssl_ciphers, the $ssl_* variables, session resumption, plain HTTP on the
# TLS port (400, error_page 497), keep-alive over TLS (parked and resumed),
# a large response, hostile handshakes and ssl_handshake_timeout.
# Keys and certificates are made with the openssl command.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl need_ssl_client openssl_in read_to_end/;

need_ssl_client();

my $t = Test::Sluice->new()->has(qw/http/)->plan(45);
my $d = $t->testdir();

sub openssl { openssl_in($d, @_) }

openssl("req -x509 -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.crt -days 3 -subj /CN=rsa.example");
openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ec.key -out ec.crt -days 3 -subj /CN=ec.example");
openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout b.key -out b.crt -days 3 -subj /CN=b.example");
openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout new.key -out new.crt -days 3 -subj /CN=new.example");
system("cp $d/rsa.crt $d/cur.crt && cp $d/rsa.key $d/cur.key") == 0 or die;

$t->write_file('big.bin', 'x' x (3 * 1024 * 1024));

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    ssl_certificate     rsa.crt;
    ssl_certificate_key rsa.key;
    ssl_certificate     ec.crt;
    ssl_certificate_key ec.key;
    ssl_session_cache   shared:SSL:1m;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        listen 127.0.0.1:%%PORT_8080%%;
        server_name default.example;
        root %%TESTDIR%%;
        location / {
            return 200 "default $https|$ssl_protocol|$ssl_cipher|$ssl_server_name|$ssl_session_reused|$scheme";
        }
        location = /big.bin { }
        location = /redir { return 302 /target; }
        location = /hang {
            proxy_pass http://127.0.0.1:%%PORT_8082%%;
            proxy_connect_timeout 30s;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        server_name b.example *.w.example ~^re\d+\.example$;
        ssl_certificate     b.crt;
        ssl_certificate_key b.key;
        location / { return 200 "b $ssl_server_name"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8443%%;
        server_name c.example;
        location / { return 200 "c $host"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        ssl_protocols TLSv1.3;
        location / { return 200 "v13 $ssl_protocol"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8445%% ssl;
        ssl_protocols TLSv1.2;
        ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256;
        ssl_handshake_timeout 1s;
        ssl_session_timeout 1s;
        ssl_session_cache builtin:100;
        error_page 497 https://$host$request_uri;
        location / { return 200 "v12 $ssl_cipher|$ssl_session_reused"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8447%% ssl;
        ssl_certificate     rsa.crt;
        ssl_certificate_key rsa.key;
        ssl_prefer_server_ciphers on;
        ssl_ciphers ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384;
        location / { return 200 "$ssl_cipher"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8446%% ssl;
        ssl_certificate     cur.crt;
        ssl_certificate_key cur.key;
        location / { return 200 "cur"; }
    }
}

EOF

$t->blackhole(port(8082));
$t->run();

# A TLS connection: (response, peer certificate subject), or (undef, why).
sub tls_get {
	my ($uri, %o) = @_;
	my $s = IO::Socket::SSL->new(
		PeerAddr => '127.0.0.1:' . port($o{port} // 8443),
		SSL_verify_mode => 0,
		SSL_hostname => $o{sni} // '',
		$o{version} ? (SSL_version => $o{version}) : (),
		$o{ciphers} ? (SSL_cipher_list => $o{ciphers}) : (),
		$o{cache} ? (SSL_session_cache => $o{cache}) : (),
		Timeout => 5,
	) or return (undef, "no connection: " . IO::Socket::SSL::errstr());
	my $subject = $s->peer_certificate('subject');
	$s->syswrite("GET $uri HTTP/1.0\r\nHost: " . ($o{host} // 'localhost') . "\r\n\r\n");
	my $r = read_to_end($s, 8);
	return ($r, $subject);
}

sub body { my ($r) = @_; return defined $r && $r =~ /\r\n\r\n(.*)$/s ? $1 : '' }

# Handshake, request, variables; no SNI: the address's default server.

my ($r, $subj) = tls_get('/');
like($r, qr{^HTTP/1.1 200 }, 'request over TLS');
like(body($r), qr/^default on\|TLSv1\.3\|TLS_AES_\S+\|\|\.\|https$/, 'variables, TLSv1.3');
($r) = tls_get('/', version => 'TLSv1_2', sni => 'default.example');
is(body($r), 'default on|TLSv1.2|ECDHE-ECDSA-AES256-GCM-SHA384|default.example|.|https',
	'variables, TLSv1.2 with SNI');
like(http_get('/'), qr/default \|\|\|\|\|http$/, 'plain port: no TLS variables');

# SNI chooses the server and its certificate; Host then routes as always.

($r, $subj) = tls_get('/', sni => 'b.example', host => 'b.example');
is($subj, '/CN=b.example', 'SNI exact: its certificate');
is(body($r), 'b b.example', 'SNI exact: Host routes');
(undef, $subj) = tls_get('/', sni => 'x.w.example');
is($subj, '/CN=b.example', 'SNI wildcard');
(undef, $subj) = tls_get('/', sni => 're12.example');
is($subj, '/CN=b.example', 'SNI regex');
($r, $subj) = tls_get('/', sni => 'unknown.example');
like($subj, qr{^/CN=(?:ec|rsa)\.example$}, 'unknown SNI: default server');
($r, $subj) = tls_get('/', sni => 'b.example', host => 'c.example');
is($subj . ' ' . body($r), '/CN=b.example c c.example',
	'certificate by SNI, server by Host');

# RSA or ECDSA, by what the client offers.

($r, $subj) = tls_get('/', version => 'TLSv1_2', ciphers => 'ECDHE-RSA-AES128-GCM-SHA256');
is($subj, '/CN=rsa.example', 'RSA suites only: the RSA certificate');
like(body($r), qr/\|ECDHE-RSA-AES128-GCM-SHA256\|/, 'RSA suite in $ssl_cipher');
(undef, $subj) = tls_get('/', version => 'TLSv1_2', ciphers => 'ECDHE-ECDSA-AES128-GCM-SHA256');
is($subj, '/CN=ec.example', 'ECDSA suites only: the ECDSA certificate');
(undef, $subj) = tls_get('/');
is($subj, '/CN=ec.example', 'ECDSA preferred by the client in TLSv1.3');
my $sc = `openssl s_client -connect 127.0.0.1:@{[port(8443)]} -tls1_3 -sigalgs rsa_pss_rsae_sha256 </dev/null 2>&1`;
like($sc, qr/subject=CN ?= ?rsa\.example/, 'RSA signature schemes only in TLSv1.3: RSA');

# ssl_protocols and ssl_ciphers.

($r) = tls_get('/', port => 8444, version => 'TLSv1_2');
ok(!defined $r, 'TLSv1.3-only server refuses a TLSv1.2 client');
($r) = tls_get('/', port => 8444);
is(body($r), 'v13 TLSv1.3', 'TLSv1.3-only server');
($r) = tls_get('/', port => 8445, version => 'TLSv1_3');
ok(!defined $r, 'TLSv1.2-only server refuses a TLSv1.3 client');
($r) = tls_get('/', port => 8445);
is(body($r), 'v12 ECDHE-ECDSA-AES128-GCM-SHA256|.', 'ssl_ciphers');

my $two_suites = 'ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256';
($r) = tls_get('/', version => 'TLSv1_2', ciphers => $two_suites);
like(body($r), qr/\|ECDHE-RSA-AES256-GCM-SHA384\|/, 'client order by default');
($r) = tls_get('/', port => 8447, version => 'TLSv1_2', ciphers => $two_suites);
is(body($r), 'ECDHE-RSA-AES128-GCM-SHA256', 'ssl_prefer_server_ciphers on: server order');

# Resumption (one worker, its session cache and tickets), with openssl
# s_client saving the session and offering it again.

sub s_client {
	my ($v, $sess, $port) = @_;
	my $p = port($port // 8443);
	return `printf 'GET / HTTP/1.0\r\n\r\n' | timeout 10 openssl s_client -connect 127.0.0.1:$p $v -$sess $d/sess.pem -quiet -ign_eof 2>/dev/null`;
}

for my $v (qw/-tls1_2 -tls1_3/) {
	s_client($v, 'sess_out');
	like(s_client($v, 'sess_in'), qr/\|r\|https$/, "\$ssl_session_reused r on resumption $v");
}

# ssl_session_timeout: a session older than it is not resumed.

like(s_client('-tls1_2', 'sess_out', 8445), qr/^v12 /m, 'new session');
like(s_client('-tls1_2', 'sess_in', 8445), qr/^v12 .*\|r$/m, 'resumed within ssl_session_timeout');
select(undef, undef, undef, 2.2);
like(s_client('-tls1_2', 'sess_in', 8445), qr/^v12 .*\|\.$/m, 'not resumed after ssl_session_timeout');

# A redirect to a path is made absolute with https.

($r) = tls_get('/redir');
like($r, qr{^Location: https://localhost:@{[port(8443)]}/target\r$}m, 'redirect with https');

# Plain HTTP on a TLS port: 400 with nginx's text, error_page 497.

$r = http_get('/', PeerAddr => '127.0.0.1:' . port(8443));
like($r, qr{^HTTP/1.1 400 .*The plain HTTP request was sent to HTTPS port}s,
	'plain HTTP to the TLS port');
$r = http_get('/x?a=1', PeerAddr => '127.0.0.1:' . port(8445));
like($r, qr{^HTTP/1.1 302 .*^Location: https://localhost/x\?a=1\r$}ms, 'error_page 497');

# Keep-alive over TLS: an idle connection is parked and resumed.

my $s = IO::Socket::SSL->new(PeerAddr => '127.0.0.1:' . port(8443),
	SSL_verify_mode => 0, SSL_hostname => '', Timeout => 5);
my $one = $s ? keepalive_tls($s, '/one') : '';
select(undef, undef, undef, 0.5);
my $two = $s ? keepalive_tls($s, '/two') : '';
ok($one =~ /default on/ && $two =~ /default on/, 'two requests on one TLS connection, idle between');

sub keepalive_tls {
	my ($s, $uri) = @_;
	$s->syswrite("GET $uri HTTP/1.1\r\nHost: localhost\r\n\r\n");
	my $buf = '';
	my $sel = IO::Select->new($s);
	while ($s->pending || $sel->can_read(3)) {
		my $n = $s->sysread($buf, 4096, length $buf) or last;
		last if $buf =~ /\r\n\r\n/ && $buf =~ /Content-Length: (\d+)/i
			&& length($buf) >= index($buf, "\r\n\r\n") + 4 + $1;
	}
	return $buf;
}

# A client that closes (close_notify, then FIN) while its request waits ends
# the request, as over plain TCP.

$s = IO::Socket::SSL->new(PeerAddr => '127.0.0.1:' . port(8443),
	SSL_verify_mode => 0, SSL_hostname => '', Timeout => 5);
$s->syswrite("GET /hang HTTP/1.1\r\nHost: localhost\r\n\r\n");
select(undef, undef, undef, 0.3);
$s->close();
ok($t->waitforlog(qr/\[info\] .*client prematurely closed connection while processing request/),
	'client abort over TLS seen');

# A response larger than the socket buffers.

($r) = tls_get('/big.bin');
is(length(body($r)), 3 * 1024 * 1024, 'large response over TLS');

# Hostile handshakes: closed, the worker stays.

my @workers = $t->worker_pids();
ok(closed_after("\x16\x03\x01\x00\x05garbagegarbage"), 'garbage record: closed');
ok(closed_after("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 1), 'truncated ClientHello: closed');
ok(closed_after("\x80" . ("\xff" x 300)), 'SSLv2-looking garbage: closed');
is(join(',', $t->worker_pids()), join(',', @workers), 'worker alive');
($r) = tls_get('/');
like($r, qr/^HTTP\/1.1 200/, 'still serving');

# Sends $bytes (and, with $shut, closes its side); true if the server closes.
sub closed_after {
	my ($bytes, $shut) = @_;
	my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8443), Timeout => 5)
		or return 0;
	$c->syswrite($bytes);
	shutdown($c, 1) if $shut;
	my $sel = IO::Select->new($c);
	my $got = '';
	while ($sel->can_read(5)) {
		my $n = $c->sysread(my $b, 4096);
		return 1 unless $n;
		$got .= $b;
		# A TLS alert is fine; then the close.
	}
	return 0;
}

# ssl_handshake_timeout: a client that sends nothing, or a part of its hello.

my $start = time();
my $quiet = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8445), Timeout => 5);
ok(closed_within($quiet, 4), 'silent client closed after ssl_handshake_timeout');
my $part = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8445), Timeout => 5);
$part->syswrite("\x16\x03\x01\x02\x00");
ok(closed_within($part, 4), 'half a hello: closed after ssl_handshake_timeout');
ok($t->waitforlog(qr/\[info\] .*client timed out \(110: Connection timed out\) while SSL handshaking/),
	'handshake timeout logged');

# Reload: a bad key keeps the running certificate; a good new pair is used.

(undef, $subj) = tls_get('/', port => 8446);
is($subj, '/CN=rsa.example', 'certificate before reload');
$t->expect_errors(qr/\[emerg\] .*cannot load certificate key ".*cur\.key": .* in .*sluice\.conf:\d+/);
$t->write_file('cur.key', "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n");
$t->signal('HUP');
ok($t->waitforlog(qr/\[emerg\] .*cannot load certificate key ".*cur\.key"/), 'bad key refused on reload');
(undef, $subj) = tls_get('/', port => 8446);
is($subj, '/CN=rsa.example', 'old certificate still served');
system("cp $d/new.crt $d/cur.crt && cp $d/new.key $d/cur.key") == 0 or die;
ok($t->reload(), 'reloaded with a new certificate');
ok(poll_until(sub { (tls_get('/', port => 8446))[1] eq '/CN=new.example' }, 5),
	'new certificate served');
