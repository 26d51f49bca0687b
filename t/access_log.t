#!/usr/bin/perl

# access_log and log_format: the predefined combined format, custom formats
# (strings concatenated), escape=default|json|none, "-" for empty values,
# inheritance and off, 444 and aborted requests logged, USR1 reopens.

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
    log_format plain '$request_method $uri ' '$status $body_bytes_sent [$http_x_test]';
    log_format json escape=json '{"ua":"$http_user_agent"}';
    log_format raw escape=none '$http_x_test';

    access_log %%TESTDIR%%/combined.log;

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location / { return 200 "hello"; }
        location /plain { access_log %%TESTDIR%%/plain.log plain; return 204; }
        location /json {
            access_log %%TESTDIR%%/json.log json;
            access_log %%TESTDIR%%/raw.log raw;
            return 200;
        }
        location /off { access_log off; return 200; }
        location /close { access_log %%TESTDIR%%/plain.log plain; return 444; }
        location /big.bin { root %%TESTDIR%%; }
    }
}

EOF

$t->run();

http("GET /x HTTP/1.0\nHost: localhost\nReferer: http://r/\nUser-Agent: UA \"1\"\n\n");
ok($t->waitforlog(qr!^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "GET /x HTTP/1\.0" 200 5 "http://r/" "UA \\x221\\x22"$!m, 3, 'combined.log'),
	'combined format with escaping');

http("GET /plain HTTP/1.0\nHost: localhost\nX-Test: a\"b\n\n");
http_get('/plain/2');
ok($t->waitforlog(qr!^GET /plain 204 0 \[a\\x22b\]\nGET /plain/2 204 0 \[-\]$!m, 3, 'plain.log'),
	'custom format, strings concatenated, - for empty');

http("GET /json HTTP/1.0\nHost: localhost\nUser-Agent: a\"b\\c\nX-Test: r\"aw\n\n");
ok($t->waitforlog(qr!^\{"ua":"a\\"b\\\\c"\}$!m, 3, 'json.log'), 'escape=json');
ok($t->waitforlog(qr!^r"aw$!m, 3, 'raw.log'), 'escape=none');

http_get('/off');
http_get('/close');
ok($t->waitforlog(qr!^GET /close 444 0 \[-\]$!m, 3, 'plain.log'), '444 logged');
unlike($t->read_file('combined.log'), qr!/off!, 'access_log off');

# A response the client stops reading is logged too, with the bytes sent.
$t->write_file('big.bin', 'x' x 20_000_000);
my $s = http("GET /big.bin HTTP/1.1\nHost: localhost\n\n", start => 1);
$s->sysread(my $first, 4096);
close $s;
ok($t->waitforlog(sub {
	$_[0] =~ m!"GET /big\.bin HTTP/1\.1" 200 (\d+) ! && $1 < 20_000_000;
}, 5, 'combined.log'), 'aborted response logged with the bytes sent');

# USR1 after a rename.
my $d = $t->testdir();
rename("$d/combined.log", "$d/combined.log.1");
$t->signal('USR1');
$t->waitforlog(qr/reopening logs/);
select(undef, undef, undef, 0.3);
http_get('/after');
ok($t->waitforlog(qr!"GET /after HTTP/1\.0" 200!, 3, 'combined.log'), 'reopened after USR1');
unlike($t->read_file('combined.log.1'), qr!/after!, 'old file no longer written');
