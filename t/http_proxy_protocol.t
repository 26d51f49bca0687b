#!/usr/bin/perl

# listen ... proxy_protocol in http: version 1 (TCP4, TCP6, UNKNOWN) and
# version 2 (INET with TLVs, LOCAL) headers written by hand, whole or split,
# over plain and TLS listeners (the header before the handshake); the
# $proxy_protocol_* variables in responses and in the access log, empty
# without the protocol; real_ip_header proxy_protocol with a trusted and an
# untrusted sender ($remote_addr, $remote_port, $realip_remote_*); broken,
# too long and wrong-version headers close the connection with nginx's log
# line; a header that does not come within client_header_timeout; and the
# directives' errors with file:line.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_ssl_client openssl_in read_to_end/;

need_ssl_client();

my $t = Test::Sluice->new()->has(qw/http/)->plan(28);
my $d = $t->testdir();

openssl_in($d, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
	. "-keyout ec.key -out ec.crt -days 3 -subj /CN=localhost");

my $vars = '$remote_addr|$remote_port|$realip_remote_addr|$proxy_protocol_addr|'
	. '$proxy_protocol_port|$proxy_protocol_server_addr|$proxy_protocol_server_port|'
	. '$proxy_protocol_tlv_alpn|$proxy_protocol_tlv_0xEA|$proxy_protocol_tlv_ssl_cn|'
	. '$proxy_protocol_tlv_ssl_verify';

(my $conf = <<'EOF') =~ s/VARS/$vars/g;

%%TEST_GLOBALS%%

events {
}

http {
    log_format pp "$server_port $realip_remote_port VARS";
    access_log %%TESTDIR%%/access.log pp;

    server {
        listen 127.0.0.1:%%PORT_8080%% proxy_protocol;
        client_header_timeout 1s;
        location / { return 200 "VARS\n"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%% proxy_protocol;
        set_real_ip_from 127.0.0.1;
        real_ip_header proxy_protocol;
        location / { return 200 "VARS\n"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8082%% proxy_protocol;
        set_real_ip_from 192.0.2.0/24;
        real_ip_header proxy_protocol;
        location / { return 200 "VARS\n"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl proxy_protocol;
        ssl_certificate ec.crt;
        ssl_certificate_key ec.key;
        location / { return 200 "$ssl_protocol VARS\n"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8083%%;
        location / { return 200 "VARS\n"; }
    }
}

EOF
$t->write_file_expand('sluice.conf', $conf);
$t->run();

my $REQ = "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n";

# A version 2 header: command (0 LOCAL, 1 PROXY), family byte, body.
sub v2 {
	my ($cmd, $fam, $body) = @_;
	return "\r\n\r\n\0\r\nQUIT\n" . pack('CCn', 0x20 | $cmd, $fam, length $body) . $body;
}

my $inet = pack('C4C4nn', 192, 0, 2, 1, 198, 51, 100, 2, 12345, 443);
my $ssl = pack('CN', 1, 7) . pack('Cn', 0x22, 4) . 'user';
my $tlvs = pack('Cn', 1, 2) . 'h2' . pack('Cn', 0xEA, 3) . 'vpc'
	. pack('Cn', 0x20, length $ssl) . $ssl;

# The body of the answer to $REQ after $header on $port (undef: none).
sub pp {
	my ($port, $header, %o) = @_;
	my $r = http($header . ($o{split} ? '' : $REQ), raw => 1,
		PeerAddr => '127.0.0.1:' . port($port),
		$o{split} ? (body => $o{split} . $REQ, sleep => 0.3) : ());
	return undef unless $r =~ /^HTTP\/1.1 200/;
	my ($body) = $r =~ /\r\n\r\n(.*)\n$/s;
	return $body;
}

like(pp(8080, "PROXY TCP4 192.0.2.1 198.51.100.2 12345 443\r\n"),
	qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|192\.0\.2\.1\|12345\|198\.51\.100\.2\|443\|\|\|\|$/,
	'v1 TCP4: the variables, $remote_addr the peer');
like(pp(8080, "PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n"),
	qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|2001:db8::1\|1\|2001:db8::2\|65535\|/, 'v1 TCP6');
like(pp(8080, "PROXY UNKNOWN\r\n"), qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|\|\|\|\|/,
	'v1 UNKNOWN: served, the variables empty');
like(pp(8080, "PROXY TCP4 192.0.2.1 198.51.100.2 0 0\r\n"), qr/\|192\.0\.2\.1\|\|198\.51\.100\.2\|\|/,
	'v1 ports 0: the port variables empty, as nginx shows them');
is(pp(8080, "PROXY TCP4 192.0.2.9 198.51.100.2 80 81\r", split => "\n") =~ s/^.*?\|.*?\|.*?\|//r,
	'192.0.2.9|80|198.51.100.2|81||||', 'v1 split across writes');
like(pp(8080, v2(1, 0x11, $inet . $tlvs)),
	qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|192\.0\.2\.1\|12345\|198\.51\.100\.2\|443\|h2\|vpc\|user\|7$/,
	'v2 INET with TLVs');
my $h6 = v2(1, 0x21, pack('n8n8nn', 0x2001, 0xdb8, 0, 0, 0, 0, 0, 5, (0) x 7, 1, 8080, 80));
like(pp(8080, $h6), qr/\|2001:db8::5\|8080\|::1\|80\|/, 'v2 INET6');
my $v2 = v2(1, 0x11, $inet . $tlvs);
is(pp(8080, substr($v2, 0, 10), split => substr($v2, 10)) =~ s/^.*?\|.*?\|.*?\|//r,
	'192.0.2.1|12345|198.51.100.2|443|h2|vpc|user|7', 'v2 split inside its signature');
like(pp(8080, v2(0, 0x11, $inet)), qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|\|\|\|\|/,
	'v2 LOCAL: served, the variables empty');
like(pp(8080, v2(1, 0x31, "\0" x 216)), qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|\|\|/,
	'v2 AF_UNIX: served, no addresses');

# realip
like(pp(8081, "PROXY TCP4 192.0.2.1 198.51.100.2 12345 443\r\n"),
	qr/^192\.0\.2\.1\|12345\|127\.0\.0\.1\|192\.0\.2\.1\|/,
	'real_ip_header proxy_protocol, trusted sender: $remote_addr and $remote_port');
like(pp(8081, "PROXY UNKNOWN\r\n"), qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|\|/,
	'trusted sender without addresses: the peer');
like(pp(8082, "PROXY TCP4 192.0.2.1 198.51.100.2 12345 443\r\n"),
	qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|192\.0\.2\.1\|12345\|/, 'untrusted sender: the peer');

# Without the protocol: the variables are empty, a PROXY line is a bad request.
like(pp(8083, ''), qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|\|\|\|\|\|\|\|$/, 'no protocol: empty');

# TLS: the header first, then the handshake.
sub tls {
	my ($header) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8443), Timeout => 5)
		or return "connect: $!";
	$s->syswrite($header);
	IO::Socket::SSL->start_SSL($s, SSL_verify_mode => 0, SSL_hostname => 'localhost',
		Timeout => 5) or return "handshake: " . IO::Socket::SSL::errstr();
	$s->syswrite($REQ);
	my $r = read_to_end($s, 5);
	my ($body) = $r =~ /\r\n\r\n(.*)\n$/s;
	return $body // $r;
}

like(tls("PROXY TCP4 192.0.2.3 198.51.100.2 4000 443\r\n"),
	qr/^TLSv1\.[23] 127\.0\.0\.1\|\d+\|127\.0\.0\.1\|192\.0\.2\.3\|4000\|/, 'TLS after a v1 header');
like(tls(v2(1, 0x11, $inet . $tlvs)), qr/^TLSv1\.[23] .*\|192\.0\.2\.1\|12345\|.*\|h2\|vpc\|user\|7$/,
	'TLS after a v2 header');

# Broken headers: no answer, the connection closed, nginx's line logged.
my $p = port(8080);
is(http($REQ, raw => 1), '', 'no header: closed without an answer');
ok($t->waitforlog(qr/\[error\] \d+#\d+: \*\d+ broken header: "GET \/ HTTP\/1\.0" while reading PROXY protocol, client: 127\.0\.0\.1, server: 127\.0\.0\.1:$p$/m),
	'broken header logged');
is(http("PROXY TCP4 1.2.3.4 5.6.7.8 70000 80\r\n$REQ", raw => 1), '', 'port out of range: closed');
ok($t->waitforlog(qr/broken header: "PROXY TCP4 1\.2\.3\.4 5\.6\.7\.8 70000 80" while reading/),
	'bad port logged');
is(http("PROXY UNKNOWN " . ('x' x 200), raw => 1), '', 'longer than 107 bytes: closed');
ok($t->waitforlog(qr/broken header: "PROXY UNKNOWN x{93}" while/), 'too long logged, 107 bytes shown');
is(http(v2(1, 0x11, $inet) =~ s/!/1/r . $REQ, raw => 1) // '', '', 'v2 with version 3: closed');
ok($t->waitforlog(qr/unknown PROXY protocol version: 3 while reading PROXY protocol/),
	'unknown version logged');

# Nothing within client_header_timeout (1s): closed, logged at info.
my $s = http("PROXY TCP4 1.2.3.4", raw => 1, start => 1);
my $t0 = time();
ok(closed_within($s, 5) && time() - $t0 < 4, 'a header not finished in time closes the connection');
ok($t->waitforlog(qr/\[info\] .*client timed out \(110: Connection timed out\) while reading PROXY protocol, client: 127\.0\.0\.1/),
	'timeout logged');

# The access log has the variables.
my $pp = port(8081);
ok($t->waitforlog(qr/^$pp \d+ 192\.0\.2\.1\|12345\|127\.0\.0\.1\|192\.0\.2\.1\|12345\|198\.51\.100\.2\|443\|/m,
	5, 'access.log'), 'access log');

# Errors, with file and line.
my @bad = (
	['listen 127.0.0.1:1 proxy_protocolx;', qr/^invalid parameter "proxy_protocolx"$/],
	['return 200 $proxy_protocol_tlv_nope;', qr/^unknown "proxy_protocol_tlv_nope" variable$/],
	['proxy_protocol_timeout 5s;', qr/^"proxy_protocol_timeout" directive is not allowed here$/],
);
my $ok = 1;
for my $c (@bad) {
	my ($text, $re) = @$c;
	$t->write_file('bad.conf', "events {}\nhttp {\nserver {\n$text\n}\n}\n");
	my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'bad.log', '-t');
	my ($msg, $l) = $err =~ /^sluice: \[emerg\] (.*) in \Q$d\E\/bad\.conf:(\d+)$/m;
	$ok &&= ($rc == 1 && defined $msg && $msg =~ $re && $l == 4) or diag($err);
}
ok($ok, 'directive errors name file and line');
