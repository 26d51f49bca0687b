#!/usr/bin/perl

# ssl_alpn (stream, nginx 1.21.4): the ALPN protocols a `listen ... ssl`
# server accepts; a client offering only others is refused in the
# handshake, one offering none is served. $ssl_alpn_protocol (stream and
# http) is the protocol chosen, empty without.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_ssl_client openssl_in read_to_end/;

need_ssl_client();

my $t = Test::Sluice->new()->has(qw/stream http/)->plan(6);
my $d = $t->testdir();

openssl_in($d, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
	. "-keyout ec.key -out ec.crt -days 3 -subj /CN=localhost");

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    ssl_certificate %%TESTDIR%%/ec.crt;
    ssl_certificate_key %%TESTDIR%%/ec.key;
    ssl_alpn h2 http/1.1;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        return "alpn=[$ssl_alpn_protocol]\n";
    }
}

http {
    access_log off;
    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        ssl_certificate %%TESTDIR%%/ec.crt;
        ssl_certificate_key %%TESTDIR%%/ec.key;
        location / { return 200 "alpn=[$ssl_alpn_protocol]\n"; }
    }
}

EOF

$t->run();

# What the stream server sends after a handshake offering @alpn; undef when
# the handshake failed.
sub offer {
	my ($port, $req, @alpn) = @_;
	my $s = IO::Socket::SSL->new(
		PeerAddr => '127.0.0.1:' . port($port),
		SSL_verify_mode => 0,
		@alpn ? (SSL_alpn_protocols => \@alpn) : (),
		Timeout => 5,
	) or return undef;
	$s->syswrite($req) if $req;
	return read_to_end($s, 5);
}

is(offer(8443, '', 'http/1.1'), "alpn=[http/1.1]\n", 'the offered protocol ssl_alpn lists is chosen');
is(offer(8443, '', 'spdy/3', 'h2'), "alpn=[h2]\n", 'the one of several that ssl_alpn lists');
is(offer(8443, ''), "alpn=[]\n", 'no ALPN offered: served, $ssl_alpn_protocol empty');
is(offer(8443, '', 'imap'), undef, 'only others offered: the handshake fails');

like(offer(8444, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 'http/1.1'),
	qr/alpn=\[http\/1\.1\]/, 'http: $ssl_alpn_protocol');
like(offer(8444, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
	qr/alpn=\[\]/, 'http: empty without ALPN');
