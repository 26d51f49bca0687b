#!/usr/bin/perl

# TLS terminated by stream servers (listen ... ssl): the decrypted bytes
# proxied as plain TCP to an HTTP backend (a large answer too), the
# certificate (RSA or ECDSA) by what the client offers, ssl_protocols and
# ssl_ciphers, the $ssl_* variables in return and in the access log,
# session resumption, ssl_handshake_timeout, garbage on the TLS port (the
# worker lives on), client certificates (ssl_verify_client on, optional_no_ca),
# and half-close: the client's close_notify is passed on
# to the upstream as a FIN, and the answer still comes back.
# Keys and certificates are made with the openssl command.

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl need_ssl_client openssl_in read_to_end/;

need_ssl_client();

my $t = Test::Sluice->new()->has(qw/stream http/)->plan(26);
my $d = $t->testdir();

sub openssl { openssl_in($d, @_) }

openssl("req -x509 -newkey rsa:2048 -nodes -keyout rsa.key -out rsa.crt -days 3 -subj /CN=rsa.example");
openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ec.key -out ec.crt -days 3 -subj /CN=ec.example");
# A CA, a client certificate it signed, and one nobody signed.
openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt "
	. "-days 3 -subj /CN=ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign,cRLSign");
$t->write_file('ee.ext', "basicConstraints=CA:false\nextendedKeyUsage=clientAuth\n");
for my $n ('client', 'rogue') {
	openssl("req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $n.key -out $n.csr -subj /CN=$n");
}
openssl("x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3 -out client.crt -extfile ee.ext");
openssl("x509 -req -in rogue.csr -signkey rogue.key -days 3 -out rogue.crt -extfile ee.ext");

$t->write_file('big.bin', join('', map { sprintf("%07d\n", $_) } 1 .. 200000));

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 1;

events {
}

stream {
    log_format tls "$server_port $status|$ssl_protocol|$ssl_cipher|$ssl_server_name|$ssl_session_reused";
    access_log %%TESTDIR%%/stream.log tls;

    ssl_certificate     rsa.crt;
    ssl_certificate_key rsa.key;
    ssl_certificate     ec.crt;
    ssl_certificate_key ec.key;
    ssl_session_cache   shared:STREAM:1m;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        proxy_pass 127.0.0.1:%%PORT_8080%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        ssl_protocols TLSv1.3;
        return "v13 $ssl_protocol|$ssl_cipher|$ssl_server_name|$ssl_session_reused\n";
    }

    server {
        listen 127.0.0.1:%%PORT_8445%% ssl;
        ssl_protocols TLSv1.2;
        ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256;
        ssl_handshake_timeout 1s;
        return "v12 $ssl_protocol|$ssl_cipher|$ssl_session_reused\n";
    }

    server {
        listen 127.0.0.1:%%PORT_8447%% ssl;
        ssl_verify_client on;
        ssl_client_certificate ca.crt;
        return "mtls $ssl_client_verify|$ssl_client_s_dn|$ssl_client_i_dn\n";
    }

    server {
        listen 127.0.0.1:%%PORT_8448%% ssl;
        ssl_verify_client optional_no_ca;
        ssl_trusted_certificate ca.crt;
        return "optional $ssl_client_verify|$ssl_client_s_dn\n";
    }

    server {
        listen 127.0.0.1:%%PORT_8446%% ssl;
        proxy_pass 127.0.0.1:%%PORT_8081%%;
        proxy_half_close on;
    }
}

http {
    access_log off;
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        root %%TESTDIR%%;
        location / { return 200 "backend $remote_addr"; }
        location = /big.bin { }
    }
}

EOF

# Reads to the end of its input, then answers with what it read and closes.
port(8081);
Test::Sluice::_release_ports();
$t->run_daemon(sub {
	my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1:' . port(8081),
		Listen => 5, ReuseAddr => 1) or die "echo: $!\n";
	$t->write_file('echo.ready', '');
	while (my $c = $l->accept()) {
		my $all = '';
		while ($c->sysread(my $b, 4096)) { $all .= $b; }
		$c->syswrite("got $all");
		close $c;
	}
});
$t->waitforfile("$d/echo.ready") or die "no echo backend\n";
$t->run();

# A TLS connection to a stream port: (what came back, the certificate's
# subject), or (undef, why).
sub tls_talk {
	my ($port, $send, %o) = @_;
	my $s = IO::Socket::SSL->new(
		PeerAddr => '127.0.0.1:' . port($port),
		SSL_verify_mode => 0,
		SSL_hostname => $o{sni} // '',
		$o{version} ? (SSL_version => $o{version}) : (),
		$o{ciphers} ? (SSL_cipher_list => $o{ciphers}) : (),
		$o{cert} ? (SSL_cert_file => "$d/$o{cert}.crt", SSL_key_file => "$d/$o{cert}.key") : (),
		Timeout => 5,
	) or return (undef, "no connection: " . IO::Socket::SSL::errstr());
	my $subject = $s->peer_certificate('subject');
	$s->syswrite($send) if defined $send;
	my $r = read_to_end($s, 8);
	return ($r, $subject);
}

# Terminated and proxied as plain TCP.

my ($r, $subj) = tls_talk(8443, "GET / HTTP/1.0\r\n\r\n");
like($r, qr{^HTTP/1.1 200 .*\r\n\r\nbackend 127\.0\.0\.1$}s, 'TLS terminated, proxied to HTTP');
($r) = tls_talk(8443, "GET /big.bin HTTP/1.0\r\n\r\n");
my ($body) = ($r // '') =~ /\r\n\r\n(.*)$/s;
is(length($body // ''), 200000 * 8, 'large answer over TLS: every byte');
ok(($body // '') eq $t->read_file('big.bin'), 'large answer: the same bytes');

# Variables; several certificates, by what the client offers.

($r, $subj) = tls_talk(8444, undef, sni => 'a.example');
like($r, qr/^v13 TLSv1\.3\|TLS_AES_\S+\|a\.example\|\.$/, 'variables, TLSv1.3 with SNI');
is($subj, '/CN=ec.example', 'ECDSA preferred by the client');
($r, $subj) = tls_talk(8445, undef, ciphers => 'ECDHE-RSA-AES128-GCM-SHA256');
is($subj, '/CN=rsa.example', 'RSA suites only: the RSA certificate');
is($r, "v12 TLSv1.2|ECDHE-RSA-AES128-GCM-SHA256|.\n", 'variables, TLSv1.2');
($r, $subj) = tls_talk(8445, undef);
is($subj, '/CN=ec.example', 'ECDSA suite: the ECDSA certificate');

# Client certificates.

($r) = tls_talk(8447, undef, cert => 'client');
is($r, "mtls SUCCESS|CN=client|CN=ca\n", 'ssl_verify_client on: a good certificate');
($r) = tls_talk(8447, undef);
ok(!$r, 'ssl_verify_client on without a certificate: closed');
ok($t->waitforlog(qr/\[info\] .* client sent no required SSL certificate while SSL handshaking, client: 127\.0\.0\.1, server: 127\.0\.0\.1:${\ port(8447)}/),
	'no certificate logged');
($r) = tls_talk(8448, undef, cert => 'rogue');
like($r, qr/^optional FAILED:self-signed certificate\|CN=rogue$/, 'optional_no_ca lets an unknown issuer through');

# ssl_protocols.

($r) = tls_talk(8444, undef, version => 'TLSv1_2');
ok(!defined $r, 'TLSv1.3-only server refuses a TLSv1.2 client');
($r) = tls_talk(8445, undef, version => 'TLSv1_3');
ok(!defined $r, 'TLSv1.2-only server refuses a TLSv1.3 client');

# Resumption, with openssl s_client saving the session and offering it.

sub s_client {
	my ($port, $v, $sess) = @_;
	my $p = port($port);
	return `timeout 10 openssl s_client -connect 127.0.0.1:$p $v -$sess $d/sess.pem -quiet -ign_eof </dev/null 2>/dev/null`;
}
s_client(8444, '-tls1_3', 'sess_out');
like(s_client(8444, '-tls1_3', 'sess_in'), qr/\|r$/m, 'resumed TLSv1.3 session: $ssl_session_reused');
s_client(8445, '-tls1_2', 'sess_out');
like(s_client(8445, '-tls1_2', 'sess_in'), qr/\|r$/m, 'resumed TLSv1.2 session');

# Half-close: the client says close_notify and keeps reading.

my $s = IO::Socket::SSL->new(PeerAddr => '127.0.0.1:' . port(8446),
	SSL_verify_mode => 0, Timeout => 5);
$r = '';
if ($s) {
	$s->syswrite('ping');
	Net::SSLeay::shutdown($s->_get_ssl_object());
	$r .= read_to_end($s, 5);
}
is($r, 'got ping', 'close_notify passed on as the end, the answer still comes');

# ssl_handshake_timeout: a client that sends nothing is closed.

my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8445));
ok(closed_within($c, 4), 'silent client closed after ssl_handshake_timeout');
ok($t->waitforlog(qr/\[info\] \d+#\d+: \*\d+ client timed out \(110: Connection timed out\) while SSL handshaking, client: 127\.0\.0\.1, server: 127\.0\.0\.1:${\ port(8445)}/),
	'handshake timeout logged as nginx');

# Garbage on the TLS port: closed (after an alert, perhaps); the worker
# serves on.

# True when $c reaches its end within $secs seconds, with no answer but a
# TLS alert on the way.
sub ends_within {
	my ($c, $secs) = @_;
	my $sel = IO::Select->new($c);
	my $got = '';
	my $end = time() + $secs;
	while ($sel->can_read($end - time())) {
		my $n = $c->sysread(my $b, 4096);
		return $got !~ /HTTP/ if !$n;
		$got .= $b;
		return 0 if time() > $end;
	}
	return 0;
}

my $pids = join ',', $t->worker_pids();
$c = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8443));
$c->syswrite("GET / HTTP/1.0\r\n\r\n");
ok(ends_within($c, 4), 'plain HTTP on the TLS port: closed');
$c = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8443));
$c->syswrite("\x16\x03\x01\x00\x08garbage!" . "\x00" x 100);
ok(ends_within($c, 4), 'a broken record: closed');
$c = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8443));
$c->syswrite("\x16\x03");
close $c;
($r) = tls_talk(8443, "GET / HTTP/1.0\r\n\r\n");
like($r, qr{backend 127\.0\.0\.1$}, 'TLS still served after garbage');
is(join(',', $t->worker_pids()), $pids, 'the same worker');
ok($t->waitforlog(qr/SSL_do_handshake\(\) failed .* while SSL handshaking, client: 127\.0\.0\.1, server: 127\.0\.0\.1:${\ port(8443)}/),
	'handshake failure logged');

# The access log: the session's TLS, 500 for a failed handshake (nginx's).

my $p = port(8444);
ok(poll_until(sub { ($t->read_file('stream.log') // '') =~ /^$p 200\|TLSv1\.3\|TLS_AES_\S+\|a\.example\|\.$/m }),
	'access log: $ssl_* of the session');
$p = port(8443);
ok(poll_until(sub { ($t->read_file('stream.log') // '') =~ /^$p 500\|-\|-\|-\|-$/m }),
	'access log: 500 for a failed handshake');

$t->stop();
