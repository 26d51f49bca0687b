#!/usr/bin/perl

# The PROXY protocol in stream: listen ... proxy_protocol (v1 and v2, plain
# and TLS: the header before the handshake), the $proxy_protocol_*
# variables in return and in the access log, the stream realip module
# (set_real_ip_from: $remote_addr and $remote_port from a trusted sender's
# header, $realip_remote_*), a broken header (closed, logged, status 400),
# proxy_protocol_timeout, and proxy_protocol on toward upstreams: a v1 line
# with the (realip) client address before the first byte, before upstream
# TLS, on every attempt (recorded by a small backend). Directive errors with
# file:line.

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_ssl_client openssl_in read_to_end/;

need_ssl_client();

my $t = Test::Sluice->new()->has(qw/stream/)->plan(19);
my $d = $t->testdir();

openssl_in($d, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
	. "-keyout ec.key -out ec.crt -days 3 -subj /CN=localhost");

my $vars = '$remote_addr|$remote_port|$realip_remote_addr|$realip_remote_port|'
	. '$proxy_protocol_addr|$proxy_protocol_port|$proxy_protocol_server_addr|'
	. '$proxy_protocol_server_port|$proxy_protocol_tlv_alpn';

(my $conf = <<'EOF') =~ s/VARS/$vars/g;

%%TEST_GLOBALS%%

events {
}

stream {
    log_format pp "$server_port $status VARS";
    access_log %%TESTDIR%%/stream.log pp;
    proxy_protocol_timeout 1s;

    upstream two {
        server 127.0.0.1:%%PORT_8101%%;
        server 127.0.0.1:%%PORT_8102%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8090%% proxy_protocol;
        return "VARS\n";
    }

    server {
        listen 127.0.0.1:%%PORT_8091%% proxy_protocol;
        set_real_ip_from 127.0.0.1;
        return "VARS\n";
    }

    server {
        listen 127.0.0.1:%%PORT_8092%% proxy_protocol;
        set_real_ip_from 192.0.2.0/24;
        return "VARS\n";
    }

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl proxy_protocol;
        ssl_certificate ec.crt;
        ssl_certificate_key ec.key;
        return "$ssl_protocol VARS\n";
    }

    server {
        listen 127.0.0.1:%%PORT_8093%% proxy_protocol;
        set_real_ip_from 127.0.0.1;
        proxy_protocol on;
        proxy_pass 127.0.0.1:%%PORT_8100%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8094%%;
        proxy_protocol on;
        proxy_ssl on;
        proxy_pass two;
    }

    server {
        listen 127.0.0.1:%%PORT_8095%%;
        return "VARS\n";
    }
}

EOF
$t->write_file_expand('sluice.conf', $conf);

# A backend that records what each connection sent (until "data\n", a TLS
# record's start, or a second of quiet) as "LENGTH\nBYTES" in rec_PORT,
# then answers "ok\n" and closes.
sub recorder {
	my ($port) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Listen => 16,
		ReuseAddr => 1) or die "recorder $port: $!\n";
	open my $r, '>', "$d/ready_$port" or die; close $r;
	local $SIG{TERM} = sub { exit 0 };
	while (my $c = $l->accept()) {
		my $got = '';
		my $sel = IO::Select->new($c);
		while ($sel->can_read(1)) {
			$c->sysread(my $b, 4096) or last;
			$got .= $b;
			last if $got =~ /data\n|\x16\x03/;
		}
		open my $f, '>>', "$d/rec_$port" or die;
		binmode $f;
		print $f length($got) . "\n" . $got;
		close $f;
		$c->syswrite("ok\n");
		close $c;
	}
}

for my $n (8100, 8101, 8102) {
	my $p = port($n);
	Test::Sluice::_release_ports();
	$t->run_daemon(\&recorder, $p);
	$t->waitforfile("$d/ready_$p") or die "recorder $p did not start\n";
}
$t->run();

sub v2 {
	my ($cmd, $fam, $body) = @_;
	return "\r\n\r\n\0\r\nQUIT\n" . pack('CCn', 0x20 | $cmd, $fam, length $body) . $body;
}
my $inet = pack('C4C4nn', 192, 0, 2, 1, 198, 51, 100, 2, 12345, 443);

# What $port answers after $header (and $data), read to its close.
sub pp {
	my ($port, $header, $data) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port($port), Timeout => 5)
		or return "connect: $!";
	$s->syswrite($header . ($data // ''));
	my $r = read_to_end($s, 5);
	chomp $r;
	return $r;
}

my $v1 = "PROXY TCP4 192.0.2.1 198.51.100.2 12345 443\r\n";
like(pp(8090, $v1), qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|\d+\|192\.0\.2\.1\|12345\|198\.51\.100\.2\|443\|$/,
	'v1: the variables, $remote_addr the peer');
like(pp(8090, "PROXY TCP6 2001:db8::1 ::1 7 8\r\n"), qr/\|2001:db8::1\|7\|::1\|8\|$/, 'v1 TCP6');
like(pp(8090, "PROXY UNKNOWN\r\n"), qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|\d+\|\|\|\|\|$/, 'v1 UNKNOWN');
like(pp(8090, "PROXY TCP4 192.0.2.1 198.51.100.2 0 0\r\n"), qr/\|192\.0\.2\.1\|\|198\.51\.100\.2\|\|$/,
	'v1 ports 0: the port variables empty, as nginx shows them');
like(pp(8090, v2(1, 0x11, $inet . pack('Cn', 1, 2) . 'h2')),
	qr/\|192\.0\.2\.1\|12345\|198\.51\.100\.2\|443\|h2$/, 'v2 with an ALPN TLV');
like(pp(8090, v2(0, 0x11, $inet)), qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|\d+\|\|\|\|\|$/, 'v2 LOCAL');
like(pp(8091, $v1), qr/^192\.0\.2\.1\|12345\|127\.0\.0\.1\|\d+\|192\.0\.2\.1\|/,
	'set_real_ip_from: a trusted sender names the client');
like(pp(8092, $v1), qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|/, 'untrusted sender: the peer');
like(pp(8095, ''), qr/^127\.0\.0\.1\|\d+\|127\.0\.0\.1\|\d+\|\|\|\|\|$/, 'no protocol: empty');

# TLS after the header.
{
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8443), Timeout => 5);
	$s->syswrite($v1);
	my $ok = IO::Socket::SSL->start_SSL($s, SSL_verify_mode => 0, Timeout => 5);
	like($ok ? read_to_end($s, 5) : IO::Socket::SSL::errstr(),
		qr/^TLSv1\.[23] 127\.0\.0\.1\|\d+\|127\.0\.0\.1\|\d+\|192\.0\.2\.1\|12345\|/, 'TLS after the header');
}

# Broken header: closed, logged, status 400 in the access log.
my $p = port(8090);
is(pp(8090, "GET / HTTP/1.0\r\n\r\n"), '', 'broken header: closed');
ok($t->waitforlog(qr/\[error\] \d+#\d+: \*\d+ broken header: "GET \/ HTTP\/1\.0" while reading PROXY protocol, client: 127\.0\.0\.1, server: 127\.0\.0\.1:$p$/m),
	'broken header logged');
ok($t->waitforlog(qr/^$p 400 127\.0\.0\.1\|/m, 5, 'stream.log'), 'status 400 logged');

# proxy_protocol_timeout (1s).
my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$p", Timeout => 5);
$s->syswrite("PROXY TCP4 ");
my $t0 = time();
ok(closed_within($s, 5) && time() - $t0 < 4, 'proxy_protocol_timeout closes the session');
ok($t->waitforlog(qr/\[info\] .*client timed out \(110: Connection timed out\) while reading PROXY protocol, client: 127\.0\.0\.1, server: 127\.0\.0\.1:$p$/m),
	'timeout logged');

# proxy_protocol on: the realip client address, then the client's bytes.
my ($p93, $p100) = (port(8093), port(8100));
is(pp(8093, "PROXY TCP4 192.0.2.5 198.51.100.2 5555 443\r\n", "data\n"), 'ok', 'proxied');
my $line = "PROXY TCP4 192.0.2.5 127.0.0.1 5555 $p93\r\ndata\n";
is($t->read_file("rec_$p100"), length($line) . "\n" . $line,
	'the upstream got the v1 line first');

# With proxy_ssl: the line before the ClientHello, on each peer tried.
pp(8094, '', 'x');
my @got = map { $t->read_file('rec_' . port($_)) } 8101, 8102;
ok((grep { /^\d+\nPROXY TCP4 127\.0\.0\.1 127\.0\.0\.1 \d+ ${\port(8094)}\r\n\x16\x03/ } @got) == 2,
	'every attempt sends the line, before TLS') or diag(explain(\@got));

# Errors, with file and line.
my @bad = (
	["server {\nlisten 127.0.0.1:1 proxy_protocolx;\nreturn x;\n}", qr/^invalid parameter "proxy_protocolx"$/, 4],
	["proxy_protocol maybe;", qr/^invalid value "maybe" in "proxy_protocol" directive, it must be "on" or "off"$/, 3],
	["proxy_protocol_timeout 1q;", qr/^"proxy_protocol_timeout" directive invalid value$/, 3],
	["set_real_ip_from 300.1.1.1;", qr/^invalid parameter "300\.1\.1\.1"$/, 3],
);
my $ok = 1;
for my $c (@bad) {
	my ($text, $re, $line) = @$c;
	$t->write_file('bad.conf', "events {}\nstream {\n$text\n}\n");
	my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'bad.log', '-t');
	my ($msg, $l) = $err =~ /^sluice: \[emerg\] (.*) in \Q$d\E\/bad\.conf:(\d+)$/m;
	$ok &&= ($rc == 1 && defined $msg && $msg =~ $re && $l == $line) or diag($err);
}
ok($ok, 'directive errors name file and line');
