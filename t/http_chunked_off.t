#!/usr/bin/perl

# chunked_transfer_encoding: on (the default), a response of unknown length
# goes to an HTTP/1.1 client chunked and the connection stays; off, it goes
# as it comes, without Content-Length, and the connection closes after it,
# as nginx. A response of known length is not affected.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(9);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    chunked_transfer_encoding off;
    proxy_buffering off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location /on {
            chunked_transfer_encoding on;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/chunked;
        }
        location /off { proxy_pass http://127.0.0.1:%%PORT_8081%%/chunked; }
        location /len { return 200 "known"; }
    }
}

EOF

$t->raw_backend(port(8081),
	'/chunked' => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		. "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
$t->run();

sub get11 {
	my ($uri) = @_;
	return http("GET $uri HTTP/1.1\nHost: localhost\nConnection: keep-alive\n\n",
		start => 1);
}

# On: chunked, and the connection stays for a second request.
my $s = get11('/on');
my $r = '';
eval {
	local $SIG{ALRM} = sub { die "timeout\n" };
	alarm(8);
	while ($r !~ /0\r\n\r\n$/) {
		my $n = $s->sysread(my $buf, 65536) or last;
		$r .= $buf;
	}
	alarm(0);
};
alarm(0);
like($r, qr!^HTTP/1\.1 200 OK\r\n!, 'on: 200');
like($r, qr!^Transfer-Encoding: chunked\r$!m, 'on: chunked');
like($r, qr!^Connection: keep-alive\r$!m, 'on: the connection stays');
$s->close();

# Off: the body as it comes, then the connection closes (http_end reads to
# the end of the connection; a connection kept would time out instead).
$r = http_end(get11('/off'));
like($r, qr!^HTTP/1\.1 200 OK\r\n!, 'off: 200');
unlike($r, qr!^(Transfer-Encoding|Content-Length):!mi, 'off: neither chunked nor a length');
like($r, qr!^Connection: close\r$!m, 'off: Connection: close');
like($r, qr!\r\n\r\nhello world$!, 'off: the body as it is, ended by the close');

$r = http("GET /len HTTP/1.1\nHost: localhost\nConnection: close\n\n");
like($r, qr!^Content-Length: 5\r$!m, 'off: a known length is sent');
like(http("GET /off HTTP/1.0\nHost: localhost\n\n"), qr!\r\n\r\nhello world$!,
	'an HTTP/1.0 client as before');

$t->stop();
