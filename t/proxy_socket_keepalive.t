#!/usr/bin/perl

# proxy_socket_keepalive on (http): SO_KEEPALIVE on HTTP/1 upstream
# connections too (it was applied to HTTP/2 upstreams only). An idle
# keep-alive connection to the upstream shows a keepalive timer in ss -o;
# one from a location without it shows none.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

`ss -V 2>/dev/null` =~ /\d/ or plan(skip_all => 'no ss(8)');

my $t = Test::Sluice->new()->has(qw/http proxy upstream_keepalive/)->plan(4);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    upstream on { server 127.0.0.1:%%PORT_8081%%; keepalive 4; }
    upstream off { server 127.0.0.1:%%PORT_8082%%; keepalive 4; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location /on { proxy_pass http://on; proxy_socket_keepalive on; }
        location /off { proxy_pass http://off; }
    }
}

EOF

$t->backend(port(8081));
$t->backend(port(8082));
$t->run();

# sluice's side of its idle connection to $port, as ss -o shows it.
sub upstream_conn {
	my ($port) = @_;
	for (1 .. 20) {
		my ($line) = grep { /127\.0\.0\.1:$port\s/ }
			split /\n/, `ss -tno state established '( dport = :$port )' 2>/dev/null`;
		return $line if defined $line;
		select undef, undef, undef, 0.1;
	}
	return 'none';
}

like(http_get('/on'), qr/ 200 /, 'proxied with proxy_socket_keepalive on');
like(upstream_conn(port(8081)), qr/timer:\(keepalive/, 'its upstream connection has SO_KEEPALIVE');
like(http_get('/off'), qr/ 200 /, 'proxied without');
unlike(upstream_conn(port(8082)), qr/keepalive|^none$/, 'its upstream connection is there, without');
