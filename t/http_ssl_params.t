#!/usr/bin/perl

# ssl_ecdh_curve (the key exchange groups, in order; a client with none of
# them fails), ssl_buffer_size (no record carries more plaintext), and
# ssl_reject_handshake (a default server without a certificate refusing
# unknown names with the unrecognized_name alert, in http and stream),
# with -t's [emerg] for unknown and unsupported groups and too small
# buffers. The client is the openssl command (-msg shows the records).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl openssl_in/;

need_openssl();

my $t = Test::Sluice->new()->has(qw/http stream/)->plan(15);
my $d = $t->testdir();

openssl_in($d, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
	. "-keyout s.key -out s.crt -days 3 -subj /CN=known");
$t->write_file('big.txt', 'x' x 5000);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl default_server;
        ssl_reject_handshake on;
    }

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        server_name known;
        ssl_certificate s.crt;
        ssl_certificate_key s.key;
        ssl_buffer_size 1k;
        location / { root %%TESTDIR%%; }
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        ssl_certificate s.crt;
        ssl_certificate_key s.key;
        ssl_ecdh_curve secp384r1:prime256v1;
        location / { root %%TESTDIR%%; }
    }
}

stream {
    server {
        listen 127.0.0.1:%%PORT_8445%% ssl;
        ssl_reject_handshake on;
        proxy_pass 127.0.0.1:%%PORT_8446%%;
    }
}

EOF

$t->run();

# GET /big.txt with `openssl s_client ARGS -msg`: what it printed.
sub client {
	my ($port, $args) = @_;
	my $p = port($port);
	return `printf 'GET /big.txt HTTP/1.0\\r\\nHost: known\\r\\n\\r\\n' | timeout 10 openssl s_client -connect 127.0.0.1:$p -msg -ign_eof $args 2>&1`;
}

# The largest application data record's length in -msg's output.
sub biggest {
	my ($out) = @_;
	my $max = 0;
	while ($out =~ /^<<< .*RecordHeader.*\n\s+17 03 03 ([0-9a-f]{2}) ([0-9a-f]{2})/mg) {
		my $n = hex("$1$2");
		$max = $n if $n > $max;
	}
	return $max;
}

# ssl_buffer_size 1k: 1024 bytes of plaintext per record, at most (TLS
# 1.3 adds its content type and tag: 17 bytes).
my $out = client(8443, '-servername known -tls1_3');
like($out, qr/x{100}/, 'known name: served');
my $max = biggest($out);
ok($max > 0 && $max <= 1024 + 17, "ssl_buffer_size 1k: records of 1k ($max)");
$out = client(8443, '-servername known -tls1_2');
$max = biggest($out);
ok($max > 0 && $max <= 1024 + 24 + 5, "ssl_buffer_size 1k, TLS 1.2 ($max)");
# The default, 16k: the 5000 bytes in one record.
$out = client(8444, '-tls1_3');
$max = biggest($out);
ok($max > 5000, "default buffer: one big record ($max)");

# ssl_ecdh_curve secp384r1:prime256v1: the client's key share (X25519)
# refused, the group of the list it also has asked for (rustls follows the
# client's order among the listed groups).
$out = client(8444, '-groups X25519:secp384r1 -tls1_3');
like($out, qr/(Negotiated TLS1\.3 group|Server Temp Key): .*(secp384r1|P-384)/, 'a listed group chosen');
$out = client(8444, '-groups X25519');
unlike($out, qr/x{100}/, 'a client with X25519 alone: no handshake');
$out = client(8444, '-groups prime256v1 -tls1_2');
like($out, qr/x{100}/, 'prime256v1 in TLS 1.2');

# ssl_reject_handshake on in the default server.
$out = client(8443, '-servername unknown');
like($out, qr/unrecognized name/i, 'unknown name: unrecognized_name alert');
unlike($out, qr/x{100}/, 'unknown name: nothing served');
$out = client(8443, '-noservername');
like($out, qr/unrecognized name/i, 'no name: unrecognized_name alert');
$out = client(8445, '-servername any');
like($out, qr/unrecognized name/i, 'stream: unrecognized_name alert');

# -t on ssl_ecdh_curve and ssl_buffer_size.
sub check {
	my ($body) = @_;
	$t->write_file('t.conf', "events { }\nhttp {\nserver {\n$body\n}\n}\n");
	my ($rc, undef, $err) = $t->run_binary('-p', "$d/", '-c', 't.conf', '-e', 'stderr', '-t');
	return $err;
}

like(check('ssl_ecdh_curve X25519:foo;'),
	qr!\[emerg\] .*SSL_CTX_set1_curves_list\("X25519:foo"\) failed \(unknown group "foo"\) in \Q$d\E/t\.conf:4!,
	'unknown group');
like(check('ssl_ecdh_curve prime256v1:X448;'),
	qr!\[emerg\] .*group "X448" is not supported.* in \Q$d\E/t\.conf:4!, 'unsupported group');
like(check('ssl_buffer_size 10;'),
	qr!\[emerg\] .*"ssl_buffer_size" must be at least 27 bytes.* in \Q$d\E/t\.conf:4!, 'buffer too small');
like(check('listen 127.0.0.1:' . port(8447) . ' ssl; ssl_reject_handshake on;'),
	qr/test is successful/, 'listen ssl with ssl_reject_handshake: no certificate needed');
