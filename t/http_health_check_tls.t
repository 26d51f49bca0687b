#!/usr/bin/perl

# health_check to peers the location reaches over TLS (proxy_pass
# https://): the checks are made over TLS with the location's proxy_ssl_*
# settings (the name and SNI, the certificate check against
# proxy_ssl_trusted_certificate, the client certificate), and send the
# location's proxy_set_header fields that are plain texts. A peer whose
# certificate the location's CA did not sign fails its checks while SSL
# handshaking. Keys and certificates are made with the openssl command.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_ssl_client ec_ca_in ec_signed_in/;

need_ssl_client();

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(9);
my $d = $t->testdir();

$t->write_file('leaf.ext', "basicConstraints=CA:FALSE\nsubjectAltName=DNS:backend.example\n");
ec_ca_in($d, $_) for 'ca', 'other';
ec_signed_in($d, 'backend', 'ca', 'leaf.ext');
ec_signed_in($d, 'client', 'ca', 'leaf.ext');

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream good {
        zone good 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
    }
    upstream wrongca {
        zone wrongca 64k;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location / {
            proxy_pass https://good;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate ca.crt;
            proxy_ssl_name backend.example;
            proxy_ssl_server_name on;
            proxy_ssl_certificate client.crt;
            proxy_ssl_certificate_key client.key;
            proxy_set_header X-Check plain;
            proxy_set_header X-Var $host;
            proxy_set_header X-Empty "";
            health_check interval=200ms uri=/health;
        }
        location /wrong/ {
            proxy_pass https://wrongca;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate other.crt;
            proxy_ssl_name backend.example;
            health_check interval=200ms uri=/health;
        }
        location /api/ { api; }
    }
}

EOF

# A TLS daemon (asking for a client certificate with verify): answers every
# request with 200, and logs each one's URI, SNI, client certificate
# subject and the X- fields it had to req_PORT.log.
sub tls_daemon {
	my ($port, %o) = @_;
	my $l = IO::Socket::SSL->new(
		LocalAddr => "127.0.0.1:$port",
		Listen => 16,
		ReuseAddr => 1,
		SSL_server => 1,
		SSL_cert_file => "$d/backend.crt",
		SSL_key_file => "$d/backend.key",
		# SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT.
		$o{verify} ? (SSL_verify_mode => 3, SSL_ca_file => "$d/ca.crt")
			: (SSL_verify_mode => 0),
	) or die "tls daemon: " . IO::Socket::SSL::errstr() . "\n";
	open my $fh, '>', "$d/tls_$port.ready" or die;
	close $fh;
	local $SIG{TERM} = sub { exit 0 };
	while (1) {
		my $c = $l->accept() or next;
		my $req = '';
		while ($req !~ /\r\n\r\n/) {
			my $n = $c->sysread(my $buf, 4096);
			last unless $n;
			$req .= $buf;
		}
		my ($uri) = $req =~ /^\S+ (\S+)/;
		my @x = sort $req =~ /^(X-[^:]*: [^\r]*)\r$/mgi;
		open my $log, '>>', "$d/req_$port.log" or die;
		print $log join('|', $uri // '-', 'sni=' . ($c->get_servername // ''),
			'client=' . ($c->peer_certificate('subject') // 'none'), @x) . "\n";
		close $log;
		$c->syswrite("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
		$c->close(SSL_fast_shutdown => 1);
	}
}

Test::Sluice::_release_ports();
for my $p ([8081, verify => 1], [8082]) {
	my ($n, @o) = @$p;
	$t->run_daemon(\&tls_daemon, port($n), @o);
	$t->waitforfile("$d/tls_" . port($n) . '.ready') or die "tls daemon did not start\n";
}
$t->run();

my ($p1, $p2) = (port(8081), port(8082));

ok(poll_until(sub { my $j = upstream_peer('good', $p1);
	$j->{state} eq 'up' && $j->{health_checks}{checks} >= 2 && $j->{health_checks}{fails} == 0 }, 6),
	'checks over TLS pass');
my @checks = grep { /^\/health\|/ } split /\n/, $t->read_file("req_$p1.log");
ok(@checks >= 2, 'the TLS backend got the checks');
my $last = $checks[-1] // '';
like($last, qr/\|sni=backend\.example\|/, 'proxy_ssl_name and proxy_ssl_server_name: the SNI');
like($last, qr/\|client=.*CN\s*=\s*client/, 'proxy_ssl_certificate: the client certificate');
like($last, qr/\|X-Check: plain(\||$)/, 'a plain proxy_set_header field is sent');
unlike($last, qr/X-Var|X-Empty/, 'one with variables or empty is not');

ok(poll_until(sub { upstream_peer('wrongca', $p2)->{state} eq 'unhealthy' }, 6),
	'a certificate the CA did not sign fails the check');
like($t->read_file('error.log'),
	qr/\[warn\] .*peer is unhealthy while SSL handshaking to upstream, health check "\/health" of peer 127\.0\.0\.1:$p2 in upstream "wrongca"/,
	'logged while SSL handshaking');
like(http_get('/x'), qr/^HTTP\/1\.1 200 .*ok$/s, 'requests reach the checked peer');
