#!/usr/bin/perl

# A request whose Host names another server than the one its SNI chose,
# when that server verifies client certificates: 421, as nginx (the
# certificate was verified, or not asked for, by the SNI server's
# settings, not by those of the server the request would reach).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl need_ssl_client openssl_in read_to_end/;

need_ssl_client();

my $t = Test::Sluice->new()->has(qw/http/)->plan(10);
my $d = $t->testdir();

sub openssl { openssl_in($d, @_) }

my $ec = '-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';
$t->write_file('ee.ext', "basicConstraints=CA:false\nextendedKeyUsage=clientAuth\n");
openssl("req -x509 $ec -keyout server.key -out server.crt -days 3 -subj /CN=server");
openssl("req -x509 $ec -keyout loose.key -out loose.crt -days 3 -subj /CN=loose");
openssl("req -x509 $ec -keyout strict.key -out strict.crt -days 3 -subj /CN=strict");
openssl("req -new $ec -keyout client.key -out client.csr -subj /CN=client");
openssl("x509 -req -in client.csr -CA loose.crt -CAkey loose.key -set_serial 7"
	. " -days 3 -out client.crt -extfile ee.ext");

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    ssl_certificate     server.crt;
    ssl_certificate_key server.key;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        server_name open;
        location / { return 200 "open $ssl_client_verify"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        server_name loose;
        ssl_verify_client optional;
        ssl_client_certificate loose.crt;
        location / { return 200 "loose $ssl_client_verify"; }
        location /host { return 200 "$host"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        server_name strict;
        ssl_verify_client on;
        ssl_client_certificate strict.crt;
        location / { return 200 "strict $ssl_client_verify"; }
    }
}

EOF

$t->run();

# GET / with SNI $sni and Host $host, client certificate $cert (none when
# undef).
sub get {
	my ($sni, $host, $cert, $uri) = @_;
	my $s = IO::Socket::SSL->new(
		PeerAddr => '127.0.0.1:' . port(8443),
		SSL_verify_mode => 0,
		SSL_hostname => $sni,
		defined $cert ? (SSL_cert_file => "$d/$cert.crt",
			SSL_key_file => "$d/$cert.key") : (),
		Timeout => 5,
	) or return "no connection: " . IO::Socket::SSL::errstr();
	$s->syswrite("GET " . ($uri // '/') . " HTTP/1.0\r\n"
		. (defined $host ? "Host: $host\r\n" : '') . "\r\n");
	my $r = read_to_end($s, 8);
	return $r;
}

sub body { my ($r) = @_; return $r =~ /\r\n\r\n(.*)$/s ? $1 : '' }

# A certificate the loose server verified does not pass the strict one.

is(body(get('loose', 'loose', 'client')), 'loose SUCCESS', 'sni and host agree');
like(get('loose', 'strict', 'client'), qr{^HTTP/1.1 421 }, 'verified elsewhere: 421');
ok($t->waitforlog(qr/\[info\] .*client attempted to request the server name different from the one that was negotiated/),
	'misdirected logged');
like(get('open', 'strict'), qr{^HTTP/1.1 421 }, 'sni without verification, host with: 421');

# The same name (any case, a final dot, a port) is no other server; a
# server that verifies nothing takes requests from any SNI.

like(get('strict', 'STRICT.:8443'), qr{^HTTP/1.1 400 .*No required SSL certificate}s, 'same name: the server\'s own check');
is(body(get('strict', 'open')), 'open NONE', 'host verifies nothing: served');
is(body(get('loose', 'open', 'client')), 'open SUCCESS', 'host verifies nothing, certificate sent');

# No Host (HTTP/1.0): the server the SNI chose serves the request, $host
# its name, as in nginx.

is(body(get('loose', undef, 'client')), 'loose SUCCESS', 'no host: the sni server');
is(body(get('loose', undef, undef, '/host')), 'loose', 'no host: $host is its name');

# No SNI: nothing was negotiated by name.

is(body(get('', 'loose')), 'loose NONE', 'no sni: served by host');

$t->stop();
